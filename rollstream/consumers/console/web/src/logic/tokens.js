// Token-level view models for a trajectory segment. Kept pure so the heavy
// work (deciding what to render for tens of thousands of tokens) is tested
// without a DOM, and the component only maps runs to spans.

/**
 * Split a segment's tokens into what the view renders, in order:
 *   {type: 'collapsed', start, end, count}   the folded prefix (a button)
 *   {type: 'call', at, call_id}              a call's completion starts here
 *   {type: 'run', start, end, mask, special, cls}  consecutive tokens sharing a class
 * A run ends where the mask or special flag changes, at a call start, or at the
 * render limit. Tokens are still rendered one span each (per-token hover); the
 * runs only let the view compute each class once.
 *
 * @param {{id: number[], mask?: number[], special?: boolean[]}} tokens
 * @param {{collapsed?: number[]|null, expanded?: boolean, limit?: number, callStarts?: {at: number, call_id: string}[]}} opts
 * @returns {{pieces: object[], shown: number, remaining: number}}
 */
export function segmentRuns(tokens, opts = {}) {
  const { collapsed = null, expanded = false, limit = Infinity, callStarts = [] } = opts;
  const n = tokens?.id?.length ?? 0;
  const mask = tokens?.mask || [];
  const special = tokens?.special || [];
  const clamp = (v) => Math.max(0, Math.min(n, Number(v) || 0));

  let hs = -1;
  let he = -1;
  if (!expanded && Array.isArray(collapsed) && collapsed.length === 2) {
    hs = clamp(collapsed[0]);
    he = clamp(collapsed[1]);
    if (he <= hs) hs = he = -1;
  }

  const starts = new Map();
  for (const cs of callStarts || []) {
    if (!starts.has(cs.at)) starts.set(cs.at, []);
    starts.get(cs.at).push(cs.call_id);
  }
  const markers = (at) => (starts.get(at) || []).map((call_id) => ({ type: 'call', at, call_id }));

  const pieces = [];
  let run = null;
  const close = () => {
    if (run) pieces.push(run);
    run = null;
  };
  let shown = 0;
  let i = 0;
  while (i < n) {
    if (shown >= limit) break;
    if (i === hs) {
      close();
      pieces.push({ type: 'collapsed', start: hs, end: he, count: he - hs });
      i = he;
      continue;
    }
    if (starts.has(i)) {
      close();
      pieces.push(...markers(i));
    }
    const m = mask[i] ? 1 : 0;
    const sp = !!special[i];
    if (!run || run.mask !== m || run.special !== sp) {
      close();
      run = { type: 'run', start: i, end: i, mask: m, special: sp, cls: 't m' + m + (sp ? ' sp' : '') };
    }
    run.end = i + 1;
    shown++;
    i++;
  }
  close();
  // A call whose completion starts at the very end (empty completion) still gets its marker.
  if (i >= n) pieces.push(...markers(n));
  const hiddenAhead = hs >= 0 ? Math.max(0, Math.min(he, n) - Math.max(hs, i)) : 0;
  return { pieces, shown, remaining: n - i - hiddenAhead };
}

/** Hover text for one token: "id 1234 · logprob -0.1234" (logprob only when recorded). */
export function tokenTitle(id, logprob) {
  if (logprob === null || logprob === undefined || !Number.isFinite(Number(logprob))) return 'id ' + id;
  return 'id ' + id + ' · logprob ' + Number(logprob).toFixed(4);
}

/**
 * Surprisal (−logprob) of every sampled token with a recorded logprob, across
 * all segments: x = token position counting through the segments in order.
 * Only mask-1 tokens count: mask-0 tokens were not sampled by the policy.
 * @returns {[number[], number[]]} uPlot data
 */
export function surprisalData(segments) {
  const xs = [];
  const ys = [];
  let offset = 0;
  for (const seg of segments || []) {
    const t = seg.tokens || {};
    const n = t.id?.length ?? 0;
    const mask = t.mask || [];
    const lps = t.logprob || [];
    // A long segment is sent from `first` on: positions stay the segment's own.
    const first = Number.isFinite(seg.first) ? seg.first : 0;
    for (let i = 0; i < n; i++) {
      const lp = lps[i];
      if (mask[i] && lp !== null && lp !== undefined && Number.isFinite(lp)) {
        xs.push(offset + first + i);
        ys.push(lp === 0 ? 0 : -lp);
      }
    }
    offset += Number.isFinite(seg.total_tokens) ? seg.total_tokens : first + n;
  }
  return [xs, ys];
}

/**
 * Break the surprisal line where tokens were skipped (mask 0 or no logprob):
 * a null y right after each run ends, so uPlot does not draw a line across
 * context tokens the policy never sampled.
 */
export function breakGaps([xs, ys]) {
  const bx = [];
  const by = [];
  for (let i = 0; i < xs.length; i++) {
    if (i > 0 && xs[i] - xs[i - 1] > 1) {
      bx.push(xs[i - 1] + 1);
      by.push(null);
    }
    bx.push(xs[i]);
    by.push(ys[i]);
  }
  return [bx, by];
}

/** Counts shown on the trajectory and compare pages. */
export function trajectoryStats(traj) {
  let tokens = 0;
  let shownTokens = 0;
  let trainable = 0;
  for (const seg of traj?.segments || []) {
    const n = seg.tokens?.id?.length ?? 0;
    shownTokens += n;
    tokens += Number.isFinite(seg.total_tokens) ? seg.total_tokens : n;
    trainable += segmentTrainable(seg);
  }
  return {
    segments: traj?.segments?.length ?? 0,
    calls: traj?.calls?.length ?? 0,
    tokens,
    shownTokens,
    trainable,
  };
}

/** A segment's trainable tokens: the server's count of the whole segment, else those sent. */
export function segmentTrainable(seg) {
  if (Number.isFinite(seg?.trainable_tokens)) return seg.trainable_tokens;
  let trainable = 0;
  for (const m of seg?.tokens?.mask || []) if (m) trainable++;
  return trainable;
}

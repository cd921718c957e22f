// Geometry of the call timeline: one bar per call, split into time to first
// token (waiting on prefill/queue) and decode. Positions are percentages of the
// whole span so the view needs no pixel measurements. The gap between a call
// and the previous call of the same thread is where the harness ran tools.

const num = (x) => (x === null || x === undefined || !Number.isFinite(Number(x)) ? null : Number(x));

/**
 * @param {object[]} calls trajectory calls (started_at, first_token_at, ended_at in epoch s)
 * @param {number|null} now end for calls still open; defaults to the latest known time
 */
export function computeTimeline(calls, now = null) {
  const timed = (calls || []).filter((c) => num(c.started_at) !== null);
  if (timed.length === 0) return { t0: null, span: 0, bars: [] };
  timed.sort((a, b) => num(a.started_at) - num(b.started_at) || (a.seq ?? 0) - (b.seq ?? 0));

  const t0 = num(timed[0].started_at);
  let tEnd = t0;
  for (const c of timed) {
    for (const k of ['started_at', 'first_token_at', 'ended_at']) {
      const v = num(c[k]);
      if (v !== null && v > tEnd) tEnd = v;
    }
  }
  if (num(now) !== null && timed.some((c) => num(c.ended_at) === null)) tEnd = Math.max(tEnd, num(now));
  const span = tEnd - t0;
  const pct = (s) => (span > 0 ? (s / span) * 100 : 0);

  const lastEndByThread = new Map();
  const bars = timed.map((c, row) => {
    const start = num(c.started_at);
    const open = num(c.ended_at) === null;
    const end = open ? tEnd : num(c.ended_at);
    // No first token (failed early or still prefilling): the whole bar is waiting.
    const ft = num(c.first_token_at) === null ? end : Math.min(Math.max(num(c.first_token_at), start), end);
    const thread = c.agent ?? null;
    const prevEnd = lastEndByThread.get(thread);
    const gapBefore = prevEnd === undefined || prevEnd === null ? null : Math.max(0, start - prevEnd);
    lastEndByThread.set(thread, open ? null : end);
    return {
      call_id: c.call_id,
      seq: c.seq ?? null,
      agent: thread,
      status: c.status ?? null,
      row,
      start: start - t0,
      ttftS: ft - start,
      decodeS: end - ft,
      gapBefore,
      open,
      left: pct(start - t0),
      ttft: pct(ft - start),
      decode: pct(end - ft),
    };
  });
  return { t0, span, bars };
}

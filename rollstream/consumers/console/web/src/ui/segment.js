// One trajectory segment's tokens, coloured by loss mask, with call markers.
// Segments can hold tens of thousands of tokens, so only the first RENDER_STEP
// are rendered and "show more" adds another step at a time.
import { h } from 'preact';
import { useMemo, useState } from 'preact/hooks';
import { fmtInt } from '../logic/format.js';
import { segmentRuns, segmentTrainable, tokenTitle } from '../logic/tokens.js';
import { html } from './html.js';

export const RENDER_STEP = 4000;

export function Segment({ seg, callSeq }) {
  const [expanded, setExpanded] = useState(false);
  const [limit, setLimit] = useState(RENDER_STEP);
  const tokens = seg.tokens || { id: [], text: [], mask: [], logprob: [], special: [] };
  const view = useMemo(
    () => segmentRuns(tokens, { collapsed: seg.collapsed, expanded, limit, callStarts: seg.call_starts }),
    [seg, expanded, limit],
  );

  // Unfolding the prefix raises the limit by its size, so tokens already on
  // screen do not move behind "show more".
  const expand = (count) => {
    setExpanded(true);
    setLimit(limit + count);
  };

  const n = tokens.id.length;
  const trainable = segmentTrainable(seg);
  const unsent = Number.isFinite(seg.first) ? seg.first : 0;

  const head = [
    seg.parent !== null && seg.parent !== undefined ? `continues segment ${seg.parent}` : null,
    `${fmtInt(seg.total_tokens ?? n)} tokens`,
    `${fmtInt(trainable)} trainable`,
    `calls ${(seg.call_ids || []).join(', ') || '—'}`,
  ]
    .filter(Boolean)
    .map((part) => ' · ' + part)
    .join('');

  // Token spans are made with h() directly rather than one template per token:
  // thousands of them go into a single render of the wrapper below.
  const children = [];
  if (unsent > 0) {
    children.push(html`<span class="collapsed-prefix muted" data-testid="unsent-prefix">the first ${fmtInt(unsent)} tokens of the system prompt and tool schemas are not sent </span>`);
  }
  for (const p of view.pieces) {
    if (p.type === 'collapsed') {
      children.push(html`<span class="collapsed-prefix" data-testid="collapsed-prefix">
        <button data-testid="expand-prefix" onClick=${() => expand(p.count)}>▸ system prompt and tool schemas (${fmtInt(p.count)} tokens)</button>
      </span>`);
    } else if (p.type === 'call') {
      const seq = callSeq?.get(p.call_id);
      children.push(h('span', { class: 'call', title: 'call ' + p.call_id + ' completion starts' }, seq !== undefined ? `call ${seq}` : p.call_id));
    } else {
      const { text = [], id, logprob = [] } = tokens;
      for (let i = p.start; i < p.end; i++) {
        children.push(h('span', { class: p.cls, title: tokenTitle(id[i], logprob[i]) }, text[i] ?? ''));
      }
    }
  }

  return html`<div class="segment" data-testid="segment">
    <div class="segment-head">
      <strong>segment ${seg.index}</strong>${head}
      ${seg.truncated ? html` · <span class="warn">truncated: ${fmtInt(n)} of ${fmtInt(seg.total_tokens)} tokens sent</span>` : ''}
    </div>
    <div class="tokens">${children}</div>
    ${view.remaining > 0
      ? html`<button class="show-more" data-testid="show-more" onClick=${() => setLimit(limit + RENDER_STEP)}>
          show ${fmtInt(Math.min(RENDER_STEP, view.remaining))} more (${fmtInt(view.remaining)} not shown)</button>`
      : ''}
  </div>`;
}

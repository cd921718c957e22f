// Compare page: one session rebuilt into two topics (e.g. scored vs. a replay
// with another strategy), side by side.
import { useMemo } from 'preact/hooks';
import { fmtInt, fmtNum } from '../logic/format.js';
import { trajectoryStats } from '../logic/tokens.js';
import { ErrorBox, Facts, Loading, trajectoryHref } from './common.js';
import { usePoll } from './hooks.js';
import { html } from './html.js';
import { Segment } from './segment.js';
import { callSeqMap } from './trajectory.js';

function Side({ source, id, topic }) {
  const { data: t, error } = usePoll(
    () => source.get('api/trajectories/' + encodeURIComponent(id), topic ? { topic } : {}),
    [source, id, topic],
  );
  const callSeq = useMemo(() => callSeqMap(t?.calls), [t]);
  if (error && !t) return html`<div class="side"><h2>${topic}</h2><${ErrorBox} error=${error} /></div>`;
  if (!t) return html`<div class="side"><h2>${topic}</h2><${Loading} /></div>`;
  const st = trajectoryStats(t);
  return html`<div class="side" data-testid="compare-side">
    <h2><a href=${trajectoryHref(t.trajectory_id, topic)}>${t.topic || topic}</a></h2>
    <${Facts} rows=${[
      ['strategy', t.strategy],
      ['status', t.status],
      ['reward', fmtNum(t.reward, 3)],
      ['segments', fmtInt(st.segments)],
      ['tokens', fmtInt(st.tokens)],
      ['trainable tokens', fmtInt(st.trainable)],
      ['calls', fmtInt(st.calls)],
    ]} />
    ${(t.segments || []).map((s) => html`<${Segment} seg=${s} callSeq=${callSeq} />`)}
  </div>`;
}

export function Compare({ source, id, params }) {
  return html`<main data-testid="compare">
    <h1 class="page-title">compare <span class="id">${id}</span></h1>
    ${!params.a || !params.b ? html`<${ErrorBox} error=${{ message: 'compare needs two topics: ?a=TOPIC&b=TOPIC' }} />` : ''}
    <div class="compare">
      <${Side} source=${source} id=${id} topic=${params.a} />
      <${Side} source=${source} id=${id} topic=${params.b} />
    </div>
  </main>`;
}

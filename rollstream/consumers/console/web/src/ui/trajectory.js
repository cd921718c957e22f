// Trajectory page: facts, evaluator details, call timeline, threads, tokens.
import { useMemo } from 'preact/hooks';
import { fmtDuration, fmtInt, fmtNum, fmtTime } from '../logic/format.js';
import { formatHash } from '../logic/route.js';
import { buildThreadTree } from '../logic/threads.js';
import { computeTimeline } from '../logic/timeline.js';
import { breakGaps, surprisalData, trajectoryStats } from '../logic/tokens.js';
import { Chart } from './chart.js';
import { ErrorBox, Facts, Loading, Section } from './common.js';
import { usePoll } from './hooks.js';
import { html } from './html.js';
import { Segment } from './segment.js';

const STRIP_OPTS = {
  scales: { x: { time: false } },
  legend: { show: false },
  series: [{ label: 'token' }, { label: '−logprob', stroke: '#7048e8', width: 1 }],
  axes: [{ label: 'token position' }, { label: '−logprob', size: 50 }],
};

export function callSeqMap(calls) {
  return new Map((calls || []).map((c) => [c.call_id, c.seq]));
}

export function trajectoryFacts(t) {
  const st = trajectoryStats(t);
  return [
    ['trajectory', t.trajectory_id],
    ['session', t.session_id],
    ['task', t.task_id],
    ['group', `${t.group_id} · sample ${t.sample_index}`],
    ['harness', t.harness],
    ['strategy', t.strategy],
    ['topic', t.topic],
    ['status', `${t.status} (session ${t.session_status})`],
    ['reward', t.reward === null || t.reward === undefined ? 'not scored' : fmtNum(t.reward, 3)],
    ['evaluator', t.evaluator ?? '—'],
    ['policy versions', (t.policy_versions || []).join(', ') || '—'],
    ['segments', fmtInt(st.segments)],
    ['tokens', `${fmtInt(st.tokens)} (${fmtInt(st.trainable)} trainable)`],
    ['calls', fmtInt(st.calls)],
  ];
}

export function Timeline({ calls }) {
  const tl = useMemo(() => computeTimeline(calls), [calls]);
  if (!tl.bars.length) return html`<p class="muted" data-testid="timeline">no timed calls</p>`;
  return html`<div class="timeline" data-testid="timeline">
    <div class="timeline-legend small">
      <span class="swatch ttft"></span> waiting for first token
      <span class="swatch decode"></span> decoding
      <span class="muted">gaps between a thread's calls: the harness running tools · span ${fmtDuration(tl.span)}, from ${fmtTime(tl.t0)} UTC</span>
    </div>
    ${tl.bars.map((b) => {
      const w = b.ttft + b.decode;
      const title = [
        `call ${b.seq ?? ''} ${b.call_id}${b.agent ? ' · agent ' + b.agent : ''}`,
        `starts +${fmtDuration(b.start)}`,
        `first token after ${fmtDuration(b.ttftS)}`,
        `decode ${fmtDuration(b.decodeS)}`,
        b.gapBefore !== null ? `tool time before ${fmtDuration(b.gapBefore)}` : null,
        b.open ? 'still open' : b.status ? `status ${b.status}` : null,
      ].filter(Boolean).join(' · ');
      return html`<div class="timeline-row">
        <span class="timeline-label">#${b.seq ?? b.row}${b.agent ? ' ' + b.agent : ''}</span>
        <span class="timeline-track">
          <span class="timeline-bar" data-testid="timeline-call" title=${title} style=${`left:${b.left}%;width:${w}%`}>
            <span class="ttft" style=${`width:${w > 0 ? (b.ttft / w) * 100 : 0}%`}></span><span class="decode" style=${`width:${w > 0 ? (b.decode / w) * 100 : 0}%`}></span>
          </span>
        </span>
      </div>`;
    })}
  </div>`;
}

function ThreadNodes({ nodes }) {
  return html`<ul>
    ${nodes.map((n) => html`<li>
      <strong>${n.agent === null ? 'main thread' : 'agent ' + n.agent}</strong>
      <span class="muted"> · ${fmtInt(n.calls)} call${n.calls === 1 ? '' : 's'}${n.spawned_by ? ' · spawned by call ' + n.spawned_by : ''}</span>
      ${n.children.length ? html`<${ThreadNodes} nodes=${n.children} />` : ''}
    </li>`)}
  </ul>`;
}

export function ThreadTree({ threads }) {
  const roots = useMemo(() => buildThreadTree(threads), [threads]);
  return html`<div class="thread-tree" data-testid="thread-tree">
    ${roots.length ? html`<${ThreadNodes} nodes=${roots} />` : html`<p class="muted">no threads</p>`}
  </div>`;
}

function Details({ t }) {
  const entries = Object.entries(t.details || {});
  return html`<div data-testid="details">
    ${entries.length
      ? html`<${Facts} rows=${entries.map(([k, v]) => [k, typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v)])} />`
      : html`<p class="muted">no evaluator details</p>`}
    ${t.error ? html`<p class="error">error: ${t.error}</p>` : ''}
  </div>`;
}

export function Trajectory({ source, id, params }) {
  const topic = params.topic || null;
  const { data: t, error } = usePoll(() => source.get('api/trajectories/' + encodeURIComponent(id), topic ? { topic } : {}), [source, id, topic]);
  const strip = useMemo(() => (t ? breakGaps(surprisalData(t.segments)) : [[], []]), [t]);
  const callSeq = useMemo(() => callSeqMap(t?.calls), [t]);

  if (error && !t) return html`<main data-testid="trajectory"><h1 class="page-title">trajectory ${id}</h1><${ErrorBox} error=${error} /></main>`;
  if (!t) return html`<main data-testid="trajectory"><${Loading} /></main>`;

  return html`<main data-testid="trajectory">
    <h1 class="page-title">trajectory <span class="id">${t.trajectory_id}</span></h1>
    ${(t.other_topics || []).length
      ? html`<p class="compare-links">${t.other_topics.map(
          (o) => html`<a data-testid="compare-link" href=${formatHash('compare', t.trajectory_id, { a: t.topic, b: o })}>compare with ${o}</a> `,
        )}</p>`
      : ''}
    <div class="columns two">
      <${Section} title="Facts"><${Facts} rows=${trajectoryFacts(t)} testid="facts" /><//>
      <${Section} title="Evaluator details"><${Details} t=${t} /><//>
    </div>
    ${t.instruction ? html`<${Section} title="Instruction"><pre class="text" data-testid="instruction">${t.instruction}</pre><//>` : ''}
    <div class="columns wide-left">
      <${Section} title="Call timeline"><${Timeline} calls=${t.calls} /><//>
      <${Section} title="Threads"><${ThreadTree} threads=${t.threads} /><//>
    </div>
    <${Section} title="Surprisal of sampled tokens">
      <${Chart} testid="logprob-strip" opts=${STRIP_OPTS} data=${strip} height=${140} />
      <p class="muted small">−logprob of each trainable (mask 1) token the policy sampled, by position through the segments. Entropy is not recorded: only the sampled token's logprob.</p>
    <//>
    <${Section} title="Tokens">
      <p class="muted small">Background: trainable tokens (loss mask 1) are green, context tokens (mask 0) grey; hover a token for its id and logprob.</p>
      ${(t.segments || []).map((s) => html`<${Segment} seg=${s} callSeq=${callSeq} />`)}
    <//>
    ${t.diff ? html`<${Section} title="Diff"><pre class="text diff" data-testid="diff">${t.diff}</pre><//>` : ''}
    ${t.final_text ? html`<${Section} title="Final text"><pre class="text" data-testid="final-text">${t.final_text}</pre><//>` : ''}
  </main>`;
}

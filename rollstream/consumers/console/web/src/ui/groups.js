// Groups page: reward over time and by policy version, off-policy staleness,
// and each GRPO group with its members' rewards and advantages.
import { useState } from 'preact/hooks';
import uPlot from 'uplot';
import { fmtInt, fmtNum, fmtPct, fmtSigned } from '../logic/format.js';
import { paddedRange, versionRange } from '../logic/ranges.js';
import { Chart, utc } from './chart.js';
import { ErrorBox, Loading, Section, trajectoryHref } from './common.js';
import { usePoll } from './hooks.js';
import { html } from './html.js';

const LIMIT = 20;
const REWARD = '#3b7dd8';
const SOLVED = '#f08c00';

// Rewards are usually in [0, 1]; always show that band so bars start at zero
// and a flat line is not blown up to fill the chart.
const rewardRange = (u, min, max) => [Math.min(0, min ?? 0), Math.max(1, max ?? 1)];

const TIME_OPTS = {
  tzDate: utc,
  scales: { x: { time: true, range: (u, min, max) => paddedRange(min, max, 60) }, y: { range: rewardRange } },
  series: [
    {},
    { label: 'mean reward', stroke: REWARD, width: 2, points: { show: true } },
    { label: 'solved rate', stroke: SOLVED, width: 2, points: { show: true } },
  ],
  axes: [{}, {}],
};

// Policy versions are few and discrete: bars for mean reward, dots for solved
// rate, and half a version of padding so a single version is not a zero-width range.
const VERSION_OPTS = {
  scales: {
    x: {
      time: false,
      range: (u, min, max) => versionRange(min, max),
    },
    y: { range: rewardRange },
  },
  series: [
    { label: 'policy version' },
    { label: 'mean reward', stroke: REWARD, fill: 'rgba(59,125,216,0.35)', paths: uPlot.paths.bars({ size: [0.5, 60] }), points: { show: false } },
    { label: 'solved rate', stroke: SOLVED, width: 0, points: { show: true, size: 9, fill: SOLVED } },
  ],
  axes: [{ incrs: [1, 2, 5, 10, 20, 50, 100], values: (u, vals) => vals.map((v) => String(v)) }, {}],
};

function Member({ m }) {
  const label = html`#${m.sample_index} <span class="muted">r</span> ${fmtNum(m.reward)} <span class="muted">A</span> ${fmtSigned(m.advantage)}`;
  return m.trajectory_id
    ? html`<a class=${'member status-' + m.status} href=${trajectoryHref(m.trajectory_id, 'scored')} title=${m.session_id}>${label}</a>`
    : html`<span class=${'member status-' + m.status} title=${m.session_id}>${label}</span>`;
}

export function Groups({ source }) {
  const [offset, setOffset] = useState(0);
  const live = source.kind === 'live';
  const rewards = usePoll(() => source.get('api/rewards'), [source], live ? 5000 : null);
  const groups = usePoll(() => source.get('api/groups', { offset, limit: LIMIT }), [source, offset], live ? 5000 : null);
  const r = rewards.data;
  const byTime = r?.by_time || {};
  const byVersion = r?.by_version || [];
  const total = groups.data?.total ?? 0;

  return html`<main data-testid="groups">
    <${ErrorBox} error=${rewards.error || groups.error} />
    <div class="columns two">
      <${Section} title="Reward over time">
        <${Chart} testid="chart-reward-time" opts=${TIME_OPTS} data=${[byTime.t || [], byTime.mean_reward || [], byTime.solved_rate || []]} />
      <//>
      <${Section} title="Reward by policy version">
        <${Chart} testid="chart-reward-version" opts=${VERSION_OPTS}
          data=${[byVersion.map((v) => v.policy_version), byVersion.map((v) => v.mean_reward), byVersion.map((v) => v.solved_rate)]} />
      <//>
    </div>
    <div class="columns two">
      <${Section} title="Staleness of scored trajectories">
        <p class="muted small">Policy versions between a trajectory's oldest version and the latest one when it was scored${
          r?.latest_policy_version !== undefined && r?.latest_policy_version !== null ? ` (latest: ${r.latest_policy_version})` : ''}.</p>
        <table class="grid" data-testid="staleness">
          <thead><tr><th>staleness</th><th>trajectories</th></tr></thead>
          <tbody>${(r?.staleness || []).map((s) => html`<tr><td class="num">${s.staleness}</td><td class="num">${fmtInt(s.count)}</td></tr>`)}</tbody>
        </table>
      <//>
      <${Section} title="By policy version">
        <table class="grid">
          <thead><tr><th>policy version</th><th>mean reward</th><th>solved</th><th>trajectories</th></tr></thead>
          <tbody>${byVersion.map((v) => html`<tr>
            <td class="num">${v.policy_version}</td><td class="num">${fmtNum(v.mean_reward)}</td>
            <td class="num">${fmtPct(v.solved_rate)}</td><td class="num">${fmtInt(v.count)}</td></tr>`)}</tbody>
        </table>
      <//>
    </div>
    <${Section} title="Groups">
      ${groups.data === undefined && !groups.error ? html`<${Loading} />` : html`
        <p class="pager">
          <button data-testid="page-prev" disabled=${offset <= 0} onClick=${() => setOffset(Math.max(0, offset - LIMIT))}>◂ newer</button>
          <span><strong data-testid="groups-total">${fmtInt(total)}</strong> groups</span>
          <button data-testid="page-next" disabled=${offset + LIMIT >= total} onClick=${() => setOffset(offset + LIMIT)}>older ▸</button>
        </p>
        <table class="grid">
          <thead><tr><th>group</th><th>task</th><th>mean reward</th><th>solved</th><th>policy versions</th><th>members (sample · reward · advantage)</th></tr></thead>
          <tbody>${(groups.data?.items || []).map((g) => html`<tr data-testid="group-row">
            <td class="id">${g.group_id}</td>
            <td>${g.task_id}</td>
            <td class="num">${fmtNum(g.mean_reward)}</td>
            <td class="num">${fmtPct(g.solved_rate)}</td>
            <td>${(g.policy_versions || []).join(', ')}</td>
            <td><div class="members">${(g.members || []).map((m) => html`<${Member} m=${m} />`)}</div></td>
          </tr>`)}</tbody>
        </table>`}
    <//>
  </main>`;
}

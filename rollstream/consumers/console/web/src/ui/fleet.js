// Fleet page: what is running now, throughput, and anything that needs attention.
import { fmtInt, fmtNum } from '../logic/format.js';
import { Chart, utc } from './chart.js';
import { html } from './html.js';
import { Section } from './common.js';

const RATES_OPTS = {
  tzDate: utc,
  legend: { show: true },
  scales: { x: { time: true } },
  series: [
    {},
    { label: 'calls/s', stroke: '#3b7dd8', width: 2, scale: 'calls' },
    { label: 'tokens/s', stroke: '#f08c00', width: 2, scale: 'tokens' },
  ],
  axes: [{}, { scale: 'calls', label: 'calls/s' }, { scale: 'tokens', side: 1, label: 'tokens/s', grid: { show: false } }],
};

function Counter({ label, value, testid }) {
  return html`<div class="counter">
    <div class="counter-value" data-testid=${testid}>${fmtInt(value)}</div>
    <div class="counter-label">${label}</div>
  </div>`;
}

function Table({ head, rows, empty = 'none' }) {
  return html`<table class="grid">
    <thead><tr>${head.map((h) => html`<th>${h}</th>`)}</tr></thead>
    <tbody>
      ${rows.length ? rows : html`<tr><td class="muted" colspan=${head.length}>${empty}</td></tr>`}
    </tbody>
  </table>`;
}

const yesNo = (b) => (b ? 'yes' : 'no');

export function Fleet({ fleet, isStatic }) {
  if (fleet === undefined) return html`<main data-testid="fleet"><p class="muted">waiting for fleet data…</p></main>`;
  if (fleet === null) {
    return html`<main data-testid="fleet"><p class="muted">${isStatic ? 'no live data in a report' : 'no fleet data'}</p></main>`;
  }
  const ended = fleet.sessions?.ended || {};
  const endedTotal = Object.values(ended).reduce((a, b) => a + (Number(b) || 0), 0);
  const h = fleet.history || {};
  const chartData = [h.t || [], h.calls_per_s || [], h.tokens_per_s || []];

  return html`<main data-testid="fleet">
    <div class="counters">
      <${Counter} label="sessions running" value=${fleet.sessions?.running ?? 0} testid="fleet-running" />
      <${Counter} label="sessions ended" value=${endedTotal} testid="fleet-ended" />
      <${Counter} label="LLM calls" value=${fleet.totals?.calls ?? 0} testid="fleet-calls" />
      <${Counter} label="tokens" value=${fleet.totals?.tokens ?? 0} testid="fleet-tokens" />
    </div>

    <${Section} title="Throughput">
      <${Chart} testid="chart-rates" opts=${RATES_OPTS} data=${chartData} />
    <//>

    <div class="columns">
      <${Section} title="Rates by harness and model">
        <${Table}
          head=${['harness', 'model', 'calls/s', 'tokens/s']}
          rows=${(fleet.rates || []).map(
            (r) => html`<tr data-testid="rate-row">
              <td>${r.harness}</td><td>${r.model}</td>
              <td class="num">${fmtNum(r.calls_per_s)}</td><td class="num">${fmtNum(r.tokens_per_s, 1)}</td>
            </tr>`,
          )}
        />
      <//>
      <${Section} title="Nodes">
        <${Table}
          head=${['node', 'running', 'ended']}
          rows=${(fleet.nodes || []).map(
            (n) => html`<tr data-testid="node-row">
              <td>${n.node_id}</td><td class="num">${fmtInt(n.running)}</td><td class="num">${fmtInt(n.ended)}</td>
            </tr>`,
          )}
        />
      <//>
      <${Section} title="Sessions ended, by status">
        <${Table}
          head=${['status', 'sessions']}
          rows=${Object.entries(ended).map(
            ([k, v]) => html`<tr data-testid="ended-row"><td>${k}</td><td class="num">${fmtInt(v)}</td></tr>`,
          )}
        />
      <//>
      <${Section} title="Policy versions in flight">
        <${Table}
          head=${['policy version', 'running sessions']}
          rows=${(fleet.policy_versions || []).map(
            (v) => html`<tr data-testid="version-row"><td>${v.version}</td><td class="num">${fmtInt(v.running)}</td></tr>`,
          )}
        />
      <//>
      <${Section} title="Errors by kind">
        <${Table}
          head=${['kind', 'count']}
          rows=${(fleet.errors || []).map(
            (e) => html`<tr data-testid="error-row"><td>${e.kind}</td><td class="num">${fmtInt(e.count)}</td></tr>`,
          )}
        />
      <//>
      <${Section} title="Consumer group lag">
        <${Table}
          head=${['group', 'topic', 'lag']}
          rows=${(fleet.lag || []).map(
            (l) => html`<tr data-testid="lag-row">
              <td>${l.group}</td><td>${l.topic}</td><td class=${'num' + (l.lag > 0 ? ' warn' : '')}>${fmtInt(l.lag)}</td>
            </tr>`,
          )}
        />
        <p>dead letters: <strong class=${fleet.deadletters > 0 ? 'alarm' : ''} data-testid="deadletters">${fmtInt(fleet.deadletters ?? 0)}</strong></p>
      <//>
      <${Section} title="Interceptors" wide=${true}>
        <${Table}
          head=${['url', 'up', 'paused', 'spool alarm', 'spool bytes']}
          rows=${(fleet.interceptors || []).map(
            (i) => html`<tr data-testid="interceptor-row">
              <td>${i.url}</td>
              <td class=${i.up ? '' : 'alarm'}>${i.up ? 'up' : 'down'}</td>
              <td>${yesNo(i.paused)}</td>
              <td class=${i.spool_alarm ? 'alarm' : ''}>${i.spool_alarm ? 'ALARM' : 'ok'}</td>
              <td class="num">${fmtInt(i.spool_bytes)}</td>
            </tr>`,
          )}
        />
      <//>
    </div>
  </main>`;
}

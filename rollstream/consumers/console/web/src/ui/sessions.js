// Sessions page: a filterable, paged table of sessions, newest first.
import { useEffect, useState } from 'preact/hooks';
import { fmtDuration, fmtInt, fmtNum, fmtTime } from '../logic/format.js';
import { ErrorBox, Loading, trajectoryHref } from './common.js';
import { useDebounced, usePoll } from './hooks.js';
import { html } from './html.js';

const LIMIT = 50;
export const EMPTY_FILTERS = { task: '', group: '', harness: '', status: '', policy_version: '' };

/** A text filter that commits after typing pauses, so each key is not a request. */
function TextFilter({ label, value, onCommit, testid }) {
  const [text, setText] = useState(value);
  const settled = useDebounced(text, 300);
  useEffect(() => {
    if (settled !== value) onCommit(settled);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [settled]);
  return html`<label>${label}
    <input type="text" data-testid=${testid} value=${text}
      onInput=${(e) => setText(e.currentTarget.value)}
      onKeyDown=${(e) => e.key === 'Enter' && onCommit(e.currentTarget.value)} />
  </label>`;
}

function SelectFilter({ label, value, options, onChange, testid }) {
  const opts = (options || []).map(String);
  // Keep the chosen value listed even when the current page's facets lack it.
  if (value !== '' && !opts.includes(value)) opts.push(value);
  return html`<label>${label}
    <select data-testid=${testid} value=${value} onChange=${(e) => onChange(e.currentTarget.value)}>
      <option value="">any</option>
      ${opts.map((o) => html`<option value=${o}>${o}</option>`)}
    </select>
  </label>`;
}

export function Sessions({ source, filters, setFilters }) {
  const [offset, setOffset] = useState(0);
  const { data, error } = usePoll(
    () => source.get('api/sessions', { ...filters, offset, limit: LIMIT }),
    [source, JSON.stringify(filters), offset],
    source.kind === 'live' ? 2000 : null,
  );
  const set = (k) => (v) => {
    setOffset(0);
    setFilters({ ...filters, [k]: v });
  };
  const facets = data?.facets || {};
  const total = data?.total ?? 0;

  return html`<main data-testid="sessions">
    <div class="filters">
      <${TextFilter} label="task" value=${filters.task} onCommit=${set('task')} testid="filter-task" />
      <${TextFilter} label="group" value=${filters.group} onCommit=${set('group')} testid="filter-group" />
      <${SelectFilter} label="harness" value=${filters.harness} options=${facets.harness} onChange=${set('harness')} testid="filter-harness" />
      <${SelectFilter} label="status" value=${filters.status} options=${facets.status} onChange=${set('status')} testid="filter-status" />
      <${SelectFilter} label="policy version" value=${filters.policy_version} options=${facets.policy_version} onChange=${set('policy_version')} testid="filter-policy" />
    </div>
    <${ErrorBox} error=${error} />
    ${data === undefined && !error
      ? html`<${Loading} />`
      : html`
        <p class="pager">
          <button data-testid="page-prev" disabled=${offset <= 0} onClick=${() => setOffset(Math.max(0, offset - LIMIT))}>◂ newer</button>
          <span>${total ? `${fmtInt(offset + 1)}–${fmtInt(Math.min(offset + LIMIT, total))} of ` : ''}<strong data-testid="sessions-total">${fmtInt(total)}</strong> sessions</span>
          <button data-testid="page-next" disabled=${offset + LIMIT >= total} onClick=${() => setOffset(offset + LIMIT)}>older ▸</button>
        </p>
        <table class="grid">
          <thead><tr>
            <th>session</th><th>task</th><th>group</th><th>sample</th><th>harness</th><th>node</th>
            <th>status</th><th>policy</th><th>calls</th><th>started (UTC)</th><th>duration</th><th>reward</th><th>trajectory</th>
          </tr></thead>
          <tbody>
            ${(data?.items || []).map((s) => html`<tr data-testid="session-row">
              <td class="id">${s.session_id}</td>
              <td>${s.task_id}</td>
              <td class="id">${s.group_id}</td>
              <td class="num">${s.sample_index}</td>
              <td>${s.harness}</td>
              <td>${s.node_id}</td>
              <td><span class=${'status status-' + s.status}>${s.status}</span></td>
              <td class="num">${s.policy_version ?? '—'}</td>
              <td class="num">${fmtInt(s.calls)}</td>
              <td>${fmtTime(s.started_at)}</td>
              <td class="num">${s.ended_at ? fmtDuration(s.ended_at - s.started_at) : 'running'}</td>
              <td class="num">${fmtNum(s.reward)}</td>
              <td>${s.trajectory_id
                ? html`<a data-testid="open-trajectory" href=${trajectoryHref(s.trajectory_id, s.reward !== null && s.reward !== undefined ? 'scored' : null)}>open</a>`
                : ''}</td>
            </tr>`)}
          </tbody>
        </table>`}
  </main>`;
}

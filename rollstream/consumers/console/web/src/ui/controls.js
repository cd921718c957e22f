// Fleet controls, shown only to the control token: pause/resume interceptors,
// export with the sessions page's filters, replay with another strategy.
import { useState } from 'preact/hooks';
import { fmtInt } from '../logic/format.js';
import { html } from './html.js';

function describe(action, res) {
  if (action === 'export') return `exported ${fmtInt(res.rows)} rows to ${res.path}`;
  if (action === 'replay') return `replay started → ${res.topic}`;
  const n = Array.isArray(res.results) ? res.results.length : 0;
  return `${action}: ok (${n} interceptor${n === 1 ? '' : 's'})`;
}

export function Controls({ source, filters }) {
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState('');
  const [failed, setFailed] = useState(false);
  const [strategy, setStrategy] = useState('per_call');

  const run = async (action, body) => {
    setBusy(true);
    setResult(`${action}…`);
    setFailed(false);
    try {
      const res = await source.post('api/control/' + action, body);
      setResult(describe(action, res || {}));
    } catch (e) {
      setFailed(true);
      setResult(`${action} failed: ${e.message}`);
    } finally {
      setBusy(false);
    }
  };
  // Only filters that are set, as the server treats an empty value as "any".
  const activeFilters = Object.fromEntries(Object.entries(filters).filter(([, v]) => v !== ''));

  return html`<div class="controls">
    <button data-testid="control-pause" disabled=${busy} onClick=${() => run('pause', {})}>pause</button>
    <button data-testid="control-resume" disabled=${busy} onClick=${() => run('resume', {})}>resume</button>
    <button data-testid="control-export" disabled=${busy} title="export scored trajectories matching the sessions filters"
      onClick=${() => run('export', { topic: 'scored', filters: activeFilters })}>export</button>
    <input data-testid="replay-strategy" size="8" value=${strategy} onInput=${(e) => setStrategy(e.currentTarget.value)} aria-label="replay strategy" />
    <button data-testid="control-replay" disabled=${busy || !strategy.trim()} onClick=${() => run('replay', { strategy: strategy.trim() })}>replay</button>
    <span class=${'control-result' + (failed ? ' error' : '')} data-testid="control-result">${result}</span>
  </div>`;
}

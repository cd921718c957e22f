// Fleet controls, shown only to the control token: pause/resume interceptors,
// export with the sessions page's filters, replay with another strategy.
import { useState } from 'preact/hooks';
import { html } from './html.js';

function describe(action, res) {
  // Exports and replays run on the server after the answer: say they started, and where.
  if (action === 'export') return `export started → ${res.path}`;
  if (action === 'replay') return `replay started → ${res.topic}`;
  const results = Array.isArray(res.results) ? res.results : [];
  const n = results.length;
  // A pause answers whether the calls in flight drained before it answered.
  const waiting = results.filter((r) => r.body && r.body.drained === false).length;
  const drained = action === 'pause' && waiting ? `; ${waiting} still draining` : '';
  return `${action}: ok (${n} interceptor${n === 1 ? '' : 's'}${drained})`;
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
    <button data-testid="control-replay" disabled=${busy || !strategy.trim()} title="rebuild the sessions matching the sessions filters with this strategy"
      onClick=${() => run('replay', { strategy: strategy.trim(), filters: activeFilters })}>replay</button>
    <span class=${'control-result' + (failed ? ' error' : '')} data-testid="control-result">${result}</span>
  </div>`;
}

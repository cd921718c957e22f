// The shell: header (nav, live status, controls) and the page for the route.
import { useEffect, useState } from 'preact/hooks';
import { fmtTime } from '../logic/format.js';
import { Compare } from './compare.js';
import { Controls } from './controls.js';
import { Fleet } from './fleet.js';
import { Groups } from './groups.js';
import { useHashRoute } from './hooks.js';
import { html } from './html.js';
import { EMPTY_FILTERS, Sessions } from './sessions.js';
import { Trajectory } from './trajectory.js';

function AuthError({ message }) {
  return html`<div class="auth-error" data-testid="auth-error">
    <h1>rollstream console</h1>
    <p><strong>The server refused this page's token.</strong></p>
    <p class="error">${message}</p>
    <p class="muted">Open the URL the console printed (it ends in #token=…) to sign in again.</p>
  </div>`;
}

function ReportBanner({ meta }) {
  return html`<div class="report-banner" data-testid="report-banner">
    report generated ${meta.generated ? fmtTime(Date.parse(meta.generated) / 1000) + ' UTC' : ''}
    ${(meta.notes || []).map((n) => html`<div class="note">${n}</div>`)}
  </div>`;
}

const NAV = [
  ['fleet', 'Fleet'],
  ['sessions', 'Sessions'],
  ['groups', 'Groups'],
];

export function App({ source }) {
  const route = useHashRoute();
  // undefined: nothing heard yet; null: the source has no fleet (a report without live data)
  const [fleet, setFleet] = useState(undefined);
  const [status, setStatus] = useState(source.kind === 'static' ? 'report' : 'reconnecting');
  const [authError, setAuthError] = useState(null);
  const [control, setControl] = useState(false);
  // Lifted here so the filters survive leaving the page and export can use them.
  const [filters, setFilters] = useState(EMPTY_FILTERS);

  useEffect(() => source.onAuthError(setAuthError), [source]);
  useEffect(() => source.subscribe(setFleet, setStatus), [source]);
  useEffect(() => {
    source.get('api/whoami').then((w) => setControl(!!w?.control), () => {});
  }, [source]);

  if (authError !== null) return html`<${AuthError} message=${authError} />`;

  const isStatic = source.kind === 'static';
  let page;
  if (route.page === 'sessions') page = html`<${Sessions} source=${source} filters=${filters} setFilters=${setFilters} />`;
  else if (route.page === 'groups') page = html`<${Groups} source=${source} />`;
  else if (route.page === 'trajectory') page = html`<${Trajectory} key=${route.id} source=${source} id=${route.id} params=${route.params} />`;
  else if (route.page === 'compare') page = html`<${Compare} key=${route.id} source=${source} id=${route.id} params=${route.params} />`;
  else page = html`<${Fleet} fleet=${fleet} isStatic=${isStatic} />`;

  return html`<div class="app">
    <header>
      <span class="title">rollstream console</span>
      <nav>
        ${NAV.map(([p, label]) => html`<a href=${'#/' + p} data-testid=${'nav-' + p} class=${route.page === p ? 'active' : ''}>${label}</a>`)}
      </nav>
      <span class=${'live-status status-' + status} data-testid="live-status">${status}</span>
      ${control && !isStatic ? html`<${Controls} source=${source} filters=${filters} />` : ''}
    </header>
    ${isStatic && source.meta ? html`<${ReportBanner} meta=${source.meta} />` : ''}
    ${page}
  </div>`;
}

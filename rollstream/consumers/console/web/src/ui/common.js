import { formatHash } from '../logic/route.js';
import { html } from './html.js';

export function ErrorBox({ error }) {
  if (!error) return null;
  return html`<p class="error" data-testid="error">${error.message || String(error)}</p>`;
}

export const Loading = () => html`<p class="muted">loading…</p>`;

/** Link to a trajectory page; `topic` omitted lets the server pick its default. */
export function trajectoryHref(id, topic = null) {
  return formatHash('trajectory', id, topic ? { topic } : {});
}

/** A two-column table of label → value. */
export function Facts({ rows, testid = null }) {
  return html`<table class="facts" data-testid=${testid}>
    <tbody>
      ${rows.map(([k, v]) => html`<tr><th>${k}</th><td>${v}</td></tr>`)}
    </tbody>
  </table>`;
}

/** A section with a heading. */
export function Section({ title, children, testid = null, wide = false }) {
  return html`<section class=${wide ? 'panel wide' : 'panel'} data-testid=${testid}>
    <h2>${title}</h2>
    ${children}
  </section>`;
}

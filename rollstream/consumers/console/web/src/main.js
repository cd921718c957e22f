// Entry point: pick the data source (embedded report data or the live server),
// take the token from the URL, and mount the app.
import { render } from 'preact';
import { tokenFromHash } from './logic/route.js';
import { createLiveSource } from './sources/live.js';
import { createStaticSource } from './sources/static.js';
import { App } from './ui/app.js';
import { html } from './ui/html.js';

const TOKEN_KEY = 'rollstream-token';

function readToken() {
  const fromUrl = tokenFromHash(location.hash);
  if (fromUrl) {
    try {
      sessionStorage.setItem(TOKEN_KEY, fromUrl);
    } catch {
      // storage disabled: the token still works for this page load
    }
    // Drop the secret from the address bar and history.
    history.replaceState(null, '', location.pathname + location.search + '#/fleet');
    return fromUrl;
  }
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

function makeSource() {
  const embedded = document.getElementById('rollstream-data');
  if (embedded) {
    let data;
    try {
      data = JSON.parse(embedded.textContent);
    } catch (e) {
      data = { notes: ['the report data could not be parsed: ' + e.message] };
    }
    return createStaticSource(data);
  }
  return createLiveSource({ token: readToken() });
}

// A URL with another token, pasted into the tab that shows this page, changes only the
// fragment, which loads nothing: start again with the new token.
window.addEventListener('hashchange', () => {
  if (!document.getElementById('rollstream-data') && tokenFromHash(location.hash)) {
    readToken();
    location.reload();
  }
});

render(html`<${App} source=${makeSource()} />`, document.getElementById('app'));

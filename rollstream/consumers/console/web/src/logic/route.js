// Hash routing and query strings. Routes live in the hash so the console works
// from a file:// report and behind any path prefix without server help.

const PAGES = new Set(['fleet', 'sessions', 'groups', 'trajectory', 'compare']);

/** Parse a query string ("a=1&b=x") into a plain object; later keys win. */
export function parseQuery(q) {
  const out = {};
  if (!q) return out;
  for (const [k, v] of new URLSearchParams(q)) out[k] = v;
  return out;
}

/** Build "?a=1&b=2" from params, skipping null, undefined and empty values. */
export function buildQuery(params) {
  const sp = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === null || v === undefined || v === '') continue;
    sp.append(k, String(v));
  }
  const s = sp.toString();
  return s ? '?' + s : '';
}

/**
 * "#/trajectory/abc%2F1?topic=scored" → {page: 'trajectory', id: 'abc/1', params: {topic: 'scored'}}.
 * Anything unknown falls back to the fleet page.
 */
export function parseHash(hash) {
  let h = (hash || '').replace(/^#/, '');
  const qi = h.indexOf('?');
  const query = qi === -1 ? '' : h.slice(qi + 1);
  if (qi !== -1) h = h.slice(0, qi);
  const parts = h.split('/').filter(Boolean);
  const page = parts[0];
  if (!PAGES.has(page)) return { page: 'fleet', id: null, params: {} };
  const needsId = page === 'trajectory' || page === 'compare';
  let id = null;
  if (needsId) {
    if (parts.length < 2) return { page: 'fleet', id: null, params: {} };
    // Ids are encoded as one path part; rejoin in case a raw "/" slipped in.
    id = safeDecode(parts.slice(1).join('/'));
  }
  return { page, id, params: parseQuery(query) };
}

/** Inverse of parseHash. */
export function formatHash(page, id = null, params = {}) {
  let h = '#/' + page;
  if (id !== null && id !== undefined) h += '/' + encodeURIComponent(id);
  return h + buildQuery(params);
}

/** The token from a "#token=SECRET" hash, or null. */
export function tokenFromHash(hash) {
  if (!hash || !hash.startsWith('#token=')) return null;
  const t = safeDecode(hash.slice('#token='.length).split('&')[0]);
  return t || null;
}

function safeDecode(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

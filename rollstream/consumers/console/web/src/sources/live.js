// The live data source: the console server's JSON API with a bearer token, and
// fleet updates from the SSE endpoint read through fetch (EventSource cannot
// send an Authorization header).

import { createSSEParser } from '../logic/sse.js';
import { buildQuery } from '../logic/route.js';
import { SourceError } from './errors.js';

// Only 401 means the token itself is refused. A 403 refuses one action (the
// read token on a control route) and must not lock the whole page.
const isRefusal = (status) => status === 401;

async function errorMessage(res) {
  try {
    const body = await res.json();
    // The server answers {"error": {"type", "message"}}; a bare string is taken too.
    if (body && typeof body.error === 'string') return body.error;
    if (body && body.error && typeof body.error.message === 'string') return body.error.message;
  } catch {
    // not JSON: fall through to the status line
  }
  return `HTTP ${res.status}${res.statusText ? ' ' + res.statusText : ''}`;
}

/**
 * @param {{token: string|null, fetchImpl?: typeof fetch, retryMs?: number}} opts
 */
export function createLiveSource({ token, fetchImpl = (...a) => fetch(...a), retryMs = 1000 }) {
  const authListeners = new Set();
  // Once the server refuses the token every later request would be refused
  // too: remember the message and stop talking to it.
  let refused = null;

  const headers = (extra = {}) => (token ? { Authorization: 'Bearer ' + token, ...extra } : { ...extra });

  async function refuse(res) {
    const msg = await errorMessage(res);
    if (refused === null) {
      refused = msg;
      for (const l of authListeners) l(msg);
    }
    return new SourceError(msg, res.status);
  }

  async function request(url, init) {
    if (refused !== null) throw new SourceError(refused, 401);
    const res = await fetchImpl(url, { cache: 'no-store', ...init });
    if (isRefusal(res.status)) throw await refuse(res);
    if (!res.ok) throw new SourceError(await errorMessage(res), res.status);
    return res.json();
  }

  function subscribe(onFleet, onStatus) {
    let stopped = false;
    let ctrl = null;
    let timer = null;

    async function connect() {
      if (stopped || refused !== null) return;
      ctrl = new AbortController();
      try {
        const res = await fetchImpl('api/stream', {
          headers: headers({ Accept: 'text/event-stream' }),
          signal: ctrl.signal,
          cache: 'no-store',
        });
        if (isRefusal(res.status)) {
          await refuse(res);
          return;
        }
        if (!res.ok || !res.body) throw new Error('stream: HTTP ' + res.status);
        onStatus('live');
        const parser = createSSEParser((ev) => {
          if (ev.event !== 'fleet') return;
          let fleet;
          try {
            fleet = JSON.parse(ev.data);
          } catch {
            return; // one bad event should not drop the connection
          }
          onFleet(fleet);
        });
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          parser.feed(decoder.decode(value, { stream: true }));
        }
      } catch {
        // network error, server gone, or our own abort: handled below
      }
      if (stopped || refused !== null) return;
      onStatus('reconnecting');
      timer = setTimeout(connect, retryMs);
    }

    onStatus('reconnecting');
    connect();
    return () => {
      stopped = true;
      clearTimeout(timer);
      if (ctrl) ctrl.abort();
    };
  }

  return {
    kind: 'live',
    meta: null,
    get: (path, params) => request(path + buildQuery(params), { headers: headers() }),
    post: (path, body) =>
      request(path, {
        method: 'POST',
        headers: headers({ 'Content-Type': 'application/json' }),
        body: JSON.stringify(body ?? {}),
      }),
    subscribe,
    /** Register a listener for a refused token; returns an unregister function. */
    onAuthError(listener) {
      authListeners.add(listener);
      if (refused !== null) listener(refused);
      return () => authListeners.delete(listener);
    },
  };
}

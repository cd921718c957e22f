import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLiveSource } from '../src/sources/live.js';

const json = (body, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

function streamOf(chunks) {
  const enc = new TextEncoder();
  return new Response(
    new ReadableStream({
      start(c) {
        for (const ch of chunks) c.enqueue(enc.encode(ch));
        c.close();
      },
    }),
    { status: 200, headers: { 'Content-Type': 'text/event-stream' } },
  );
}

const waitFor = async (cond, ms = 2000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
};

test('get sends the bearer token and the query; errors carry the server message', async () => {
  const seen = [];
  const src = createLiveSource({
    token: 'sekret',
    fetchImpl: async (url, init) => {
      seen.push([url, init.headers.Authorization]);
      return url.startsWith('api/sessions') ? json({ total: 0 }) : json({ error: 'no such trajectory' }, 404);
    },
  });
  assert.deepEqual(await src.get('api/sessions', { task: 't 1', harness: '', offset: 0 }), { total: 0 });
  assert.deepEqual(seen[0], ['api/sessions?task=t+1&offset=0', 'Bearer sekret']);
  await assert.rejects(src.get('api/trajectories/x'), (e) => e.status === 404 && e.message === 'no such trajectory');
});

test('post sends JSON', async () => {
  let got;
  const src = createLiveSource({
    token: 't',
    fetchImpl: async (url, init) => {
      got = [url, init.method, init.headers['Content-Type'], JSON.parse(init.body)];
      return json({ ok: true, topic: 'x' });
    },
  });
  assert.deepEqual(await src.post('api/control/replay', { strategy: 'exact' }), { ok: true, topic: 'x' });
  assert.deepEqual(got, ['api/control/replay', 'POST', 'application/json', { strategy: 'exact' }]);
});

test('a refused token notifies once and stops all further requests', async () => {
  let calls = 0;
  const src = createLiveSource({
    token: 'bad',
    fetchImpl: async () => {
      calls++;
      return json({ error: 'bad token' }, 401);
    },
  });
  const messages = [];
  src.onAuthError((m) => messages.push(m));
  await assert.rejects(src.get('api/fleet'), (e) => e.status === 401 && e.message === 'bad token');
  await assert.rejects(src.get('api/fleet'), /bad token/);
  assert.equal(calls, 1);
  assert.deepEqual(messages, ['bad token']);
  // A late listener still hears about it.
  const late = [];
  src.onAuthError((m) => late.push(m));
  assert.deepEqual(late, ['bad token']);
});

test('subscribe parses fleet events from a split stream and reconnects when it ends', async () => {
  let connects = 0;
  const fleets = [];
  const statuses = [];
  const src = createLiveSource({
    token: 't',
    retryMs: 20,
    fetchImpl: async (url, init) => {
      assert.equal(url, 'api/stream');
      assert.equal(init.headers.Authorization, 'Bearer t');
      connects++;
      return streamOf([': ping\r\nevent: fle', 'et\r\ndata: {"now":', String(connects), '}\r\n\r', '\nevent: other\ndata: 1\n\n']);
    },
  });
  const unsub = src.subscribe((f) => fleets.push(f), (s) => statuses.push(s));
  await waitFor(() => connects >= 2 && fleets.length >= 2);
  unsub();
  assert.deepEqual(fleets.slice(0, 2), [{ now: 1 }, { now: 2 }]);
  assert.deepEqual(statuses.slice(0, 4), ['reconnecting', 'live', 'reconnecting', 'live']);
  const after = connects;
  await new Promise((r) => setTimeout(r, 80));
  assert.ok(connects <= after + 1, 'no reconnect loop after unsubscribe');
});

test('subscribe stops on a refused token', async () => {
  let connects = 0;
  const src = createLiveSource({
    token: 't',
    retryMs: 5,
    fetchImpl: async () => {
      connects++;
      return json({ error: { type: 'unauthorized', message: 'token expired' } }, 401);
    },
  });
  const messages = [];
  src.onAuthError((m) => messages.push(m));
  src.subscribe(() => {}, () => {});
  await waitFor(() => messages.length === 1);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(connects, 1);
  assert.deepEqual(messages, ['token expired']);
});

test('network errors show reconnecting and retry', async () => {
  let connects = 0;
  const statuses = [];
  const src = createLiveSource({
    token: 't',
    retryMs: 5,
    fetchImpl: async () => {
      connects++;
      throw new TypeError('connection refused');
    },
  });
  const unsub = src.subscribe(() => {}, (s) => statuses.push(s));
  await waitFor(() => connects >= 3);
  unsub();
  assert.ok(statuses.every((s) => s === 'reconnecting'));
});

test('a 403 refuses one action and leaves the page working', async () => {
  let calls = 0;
  const src = createLiveSource({
    token: 't',
    fetchImpl: async (url) => {
      calls++;
      if (url.startsWith('api/control/')) {
        return json({ error: { type: 'forbidden', message: 'the control token is needed' } }, 403);
      }
      return json({ total: 3 });
    },
  });
  const refusals = [];
  src.onAuthError((m) => refusals.push(m));
  await assert.rejects(src.post('api/control/pause', {}), /the control token is needed/);
  assert.deepEqual(await src.get('api/sessions', {}), { total: 3 });
  assert.deepEqual(refusals, []);
  assert.equal(calls, 2);
});

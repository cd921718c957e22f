import { test } from 'node:test';
import assert from 'node:assert/strict';
import { facetsOf, pageOf } from '../src/logic/paging.js';
import { createStaticSource, NOT_IN_REPORT, SESSION_FILTERS } from '../src/sources/static.js';

const sessions = Array.from({ length: 7 }, (_, i) => ({
  session_id: 's' + i,
  task_id: i < 4 ? 'task-a' : 'task-b',
  group_id: 'g' + (i % 2),
  harness: i % 3 === 0 ? 'pi' : 'codex',
  status: i === 6 ? 'running' : 'completed',
  policy_version: i < 5 ? 0 : 1,
  started_at: 1000 + i,
}));

test('pageOf pages with offset and limit', () => {
  const p = pageOf(sessions, { offset: 2, limit: 3 });
  assert.equal(p.total, 7);
  assert.equal(p.offset, 2);
  assert.equal(p.limit, 3);
  assert.deepEqual(p.items.map((s) => s.session_id), ['s2', 's3', 's4']);
  assert.deepEqual(pageOf(sessions, { offset: '6', limit: '5' }).items.map((s) => s.session_id), ['s6']);
  assert.deepEqual(pageOf(sessions, { offset: 10 }).items, []);
  assert.equal(pageOf(sessions, {}).limit, 50);
  assert.equal(pageOf(sessions, { offset: -3 }).offset, 0);
});

test('pageOf filters by exact match on non-empty params only', () => {
  const p = pageOf(sessions, { task: 'task-a', harness: '', status: null }, SESSION_FILTERS);
  assert.equal(p.total, 4);
  // Exact, not substring.
  assert.equal(pageOf(sessions, { task: 'task' }, SESSION_FILTERS).total, 0);
  // Params arrive as strings; numbers still match.
  assert.deepEqual(
    pageOf(sessions, { policy_version: '1' }, SESSION_FILTERS).items.map((s) => s.session_id),
    ['s5', 's6'],
  );
  assert.deepEqual(
    pageOf(sessions, { harness: 'pi', group: 'g0' }, SESSION_FILTERS).items.map((s) => s.session_id),
    ['s0', 's6'],
  );
  // Total counts the filtered set, not the page.
  const paged = pageOf(sessions, { task: 'task-a', limit: 1, offset: 1 }, SESSION_FILTERS);
  assert.equal(paged.total, 4);
  assert.deepEqual(paged.items.map((s) => s.session_id), ['s1']);
});

test('facetsOf lists sorted distinct values', () => {
  assert.deepEqual(facetsOf(sessions, ['harness', 'policy_version']), { harness: ['codex', 'pi'], policy_version: [0, 1] });
});

const trajectory = { trajectory_id: 't1', topic: 'rollstream.scored', segments: [] };
const data = {
  generated: '2025-12-06T00:00:00Z',
  notes: ['n'],
  fleet: null,
  sessions,
  groups: [
    { group_id: 'g0', task_id: 'task-a', members: [] },
    { group_id: 'g1', task_id: 'task-b', members: [] },
  ],
  rewards: { by_time: { t: [] }, by_version: [], staleness: [], latest_policy_version: 0 },
  trajectories: { t1: trajectory },
};

test('static source answers the API paths', async () => {
  const src = createStaticSource(data);
  assert.equal(src.kind, 'static');
  assert.deepEqual(await src.get('api/whoami'), { control: false });
  const page = await src.get('api/sessions', { status: 'completed', offset: 0, limit: 2 });
  assert.equal(page.total, 6);
  // Newest first.
  assert.deepEqual(page.items.map((s) => s.session_id), ['s5', 's4']);
  assert.deepEqual(page.facets.status, ['completed', 'running']);
  const groups = await src.get('api/groups', { task: 'task-b' });
  assert.deepEqual(groups.items.map((g) => g.group_id), ['g1']);
  assert.equal(groups.limit, 20);
  assert.equal(await src.get('api/fleet'), null);
  assert.equal((await src.get('api/rewards')).latest_policy_version, 0);
  assert.equal(await src.get('api/trajectories/t1', { topic: 'scored' }), trajectory);
  assert.equal(await src.get('api/trajectories/t1', { topic: 'rollstream.scored' }), trajectory);
  assert.equal(await src.get('api/trajectories/t1'), trajectory);
});

test('static source: a trajectory not in the report, or in another topic, is a clear 404', async () => {
  const src = createStaticSource(data);
  for (const [path, params] of [
    ['api/trajectories/nope', {}],
    ['api/trajectories/t1', { topic: 'rollstream.trajectories.exact' }],
    ['api/trajectories/toString', {}],
  ]) {
    await assert.rejects(src.get(path, params), (e) => e.status === 404 && e.message === NOT_IN_REPORT);
  }
});

test('static source: subscribe reports once with status "report"', () => {
  const src = createStaticSource({ ...data, fleet: { now: 1 } });
  const fleets = [];
  const statuses = [];
  const unsub = src.subscribe((f) => fleets.push(f), (s) => statuses.push(s));
  assert.deepEqual(fleets, [{ now: 1 }]);
  assert.deepEqual(statuses, ['report']);
  assert.equal(typeof unsub, 'function');
  const none = [];
  createStaticSource({}).subscribe((f) => none.push(f), () => {});
  assert.deepEqual(none, [null]);
});

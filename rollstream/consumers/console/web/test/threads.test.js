import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildThreadTree } from '../src/logic/threads.js';

const shape = (nodes) => nodes.map((n) => [n.agent, n.calls, shape(n.children)]);

test('sub-agents nest under their parent, main thread first', () => {
  const roots = buildThreadTree([
    { agent: 'b', parent: null, spawned_by: 'c1', call_ids: ['c5'] },
    { agent: 'a2', parent: 'a', spawned_by: 'c3', call_ids: ['c4'] },
    { agent: null, parent: null, spawned_by: null, call_ids: ['c1', 'c2'] },
    { agent: 'a', parent: null, spawned_by: 'c1', call_ids: ['c3', 'c6', 'c7'] },
  ]);
  assert.deepEqual(shape(roots), [[null, 2, [['a', 3, [['a2', 1, []]]], ['b', 1, []]]]]);
  assert.equal(roots[0].children[0].spawned_by, 'c1');
});

test('threads with an unknown parent or a parent cycle are still shown', () => {
  const roots = buildThreadTree([
    { agent: 'orphan', parent: 'ghost', call_ids: [] },
    { agent: 'x', parent: 'y', call_ids: ['1'] },
    { agent: 'y', parent: 'x', call_ids: ['2'] },
  ]);
  const all = [];
  const walk = (ns) => ns.forEach((n) => (all.push(n.agent), walk(n.children)));
  walk(roots);
  assert.deepEqual(all.sort(), ['orphan', 'x', 'y']);
  assert.ok(roots.some((n) => n.agent === 'orphan'));
});

test('no threads', () => {
  assert.deepEqual(buildThreadTree([]), []);
  assert.deepEqual(buildThreadTree(undefined), []);
});

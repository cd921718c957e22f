import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildQuery, formatHash, parseHash, parseQuery, tokenFromHash } from '../src/logic/route.js';

test('default and unknown routes go to the fleet page', () => {
  for (const h of ['', '#', '#/', '#/nope', '#token=abc', '#/trajectory', '#/compare/']) {
    assert.equal(parseHash(h).page, 'fleet', h);
  }
});

test('parses pages, ids and params', () => {
  assert.deepEqual(parseHash('#/sessions'), { page: 'sessions', id: null, params: {} });
  assert.deepEqual(parseHash('#/groups?x=1'), { page: 'groups', id: null, params: { x: '1' } });
  assert.deepEqual(parseHash('#/trajectory/abc-1?topic=scored'), {
    page: 'trajectory',
    id: 'abc-1',
    params: { topic: 'scored' },
  });
  assert.deepEqual(parseHash('#/compare/t%2F1?a=rollstream.scored&b=rollstream.trajectories.exact'), {
    page: 'compare',
    id: 't/1',
    params: { a: 'rollstream.scored', b: 'rollstream.trajectories.exact' },
  });
});

test('formatHash round-trips through parseHash', () => {
  const cases = [
    ['fleet', null, {}],
    ['trajectory', 'a b/c?d', { topic: 'scored' }],
    ['compare', 'x', { a: 'rollstream.scored', b: 'rollstream.trajectories.exact' }],
  ];
  for (const [page, id, params] of cases) {
    assert.deepEqual(parseHash(formatHash(page, id, params)), { page, id, params });
  }
  assert.equal(formatHash('trajectory', 't1', { topic: '' }), '#/trajectory/t1');
});

test('buildQuery skips empty values and encodes', () => {
  assert.equal(buildQuery({}), '');
  assert.equal(buildQuery({ a: '', b: null, c: undefined }), '');
  assert.equal(buildQuery({ task: 'a&b', offset: 0, limit: 50 }), '?task=a%26b&offset=0&limit=50');
  assert.deepEqual(parseQuery('task=a%26b&offset=0'), { task: 'a&b', offset: '0' });
});

test('tokenFromHash', () => {
  assert.equal(tokenFromHash('#token=s3cr%2Bt'), 's3cr+t');
  assert.equal(tokenFromHash('#token='), null);
  assert.equal(tokenFromHash('#/fleet'), null);
  assert.equal(tokenFromHash(''), null);
});

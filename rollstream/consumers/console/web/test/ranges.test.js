import { test } from 'node:test';
import assert from 'node:assert/strict';
import { paddedRange, versionRange } from '../src/logic/ranges.js';

test('a single time is widened by the pad on each side', () => {
  assert.deepEqual(paddedRange(1000, 1000, 60), [940, 1060]);
});

test('a real span is kept as it is', () => {
  assert.deepEqual(paddedRange(10, 70, 60), [10, 70]);
});

test('no data gives a small range from zero', () => {
  assert.deepEqual(paddedRange(null, null, 5), [0, 10]);
  assert.deepEqual(paddedRange(undefined, 3, 5), [0, 10]);
});

test('versions get half a version of room, one version or several', () => {
  assert.deepEqual(versionRange(0, 0), [-0.5, 0.5]);
  assert.deepEqual(versionRange(1, 4), [0.5, 4.5]);
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fmtDuration, fmtInt, fmtLogprob, fmtNum, fmtPct, fmtSigned, fmtTime } from '../src/logic/format.js';

test('fmtInt adds thousands separators', () => {
  assert.equal(fmtInt(0), '0');
  assert.equal(fmtInt(999), '999');
  assert.equal(fmtInt(1000), '1,000');
  assert.equal(fmtInt(45000), '45,000');
  assert.equal(fmtInt(1234567), '1,234,567');
  assert.equal(fmtInt(-1234), '-1,234');
  assert.equal(fmtInt(12.6), '13');
  assert.equal(fmtInt(null), '—');
  assert.equal(fmtInt(NaN), '—');
});

test('floats, signs and percentages', () => {
  assert.equal(fmtNum(1.5), '1.50');
  assert.equal(fmtNum(230, 1), '230.0');
  assert.equal(fmtNum(null), '—');
  assert.equal(fmtSigned(0.25), '+0.25');
  assert.equal(fmtSigned(-0.75), '-0.75');
  assert.equal(fmtSigned(0), '0.00');
  assert.equal(fmtPct(0.5), '50%');
  assert.equal(fmtPct(2 / 3), '67%');
  assert.equal(fmtLogprob(-0.123456), '-0.1235');
  assert.equal(fmtLogprob(null), null);
});

test('fmtTime is UTC', () => {
  assert.equal(fmtTime(1765000000.5), '2025-12-06 05:46:40');
  assert.equal(fmtTime(null), '—');
});

test('fmtDuration picks a unit', () => {
  assert.equal(fmtDuration(0.85), '850 ms');
  assert.equal(fmtDuration(12.34), '12.3 s');
  assert.equal(fmtDuration(125), '2m 05s');
  assert.equal(fmtDuration(3720), '1h 02m');
  assert.equal(fmtDuration(-2), '-2.0 s');
  assert.equal(fmtDuration(undefined), '—');
});

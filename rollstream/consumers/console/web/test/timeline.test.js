import { test } from 'node:test';
import assert from 'node:assert/strict';
import { computeTimeline } from '../src/logic/timeline.js';

const T = 1765000000;
const close = (a, b) => Math.abs(a - b) < 1e-9;

test('bars are relative to the first call and split into TTFT and decode', () => {
  const calls = [
    { call_id: 'c2', seq: 1, agent: null, started_at: T + 6, first_token_at: T + 7, ended_at: T + 10 },
    { call_id: 'c1', seq: 0, agent: null, started_at: T, first_token_at: T + 1, ended_at: T + 4 },
  ];
  const tl = computeTimeline(calls);
  assert.equal(tl.t0, T);
  assert.equal(tl.span, 10);
  assert.deepEqual(tl.bars.map((b) => b.call_id), ['c1', 'c2']);
  const [a, b] = tl.bars;
  assert.ok(close(a.left, 0) && close(a.ttft, 10) && close(a.decode, 30));
  assert.ok(close(b.left, 60) && close(b.ttft, 10) && close(b.decode, 30));
  assert.equal(a.gapBefore, null);
  // The 2 s between c1's end and c2's start is tool time.
  assert.equal(b.gapBefore, 2);
  assert.equal(b.ttftS, 1);
  assert.equal(b.decodeS, 3);
  assert.equal(b.start, 6);
});

test('tool gaps are measured within a thread, not across threads', () => {
  const tl = computeTimeline([
    { call_id: 'm1', agent: null, started_at: T, first_token_at: T + 1, ended_at: T + 2 },
    { call_id: 's1', agent: 'sub', started_at: T + 3, first_token_at: T + 3.5, ended_at: T + 4 },
    { call_id: 'm2', agent: null, started_at: T + 5, first_token_at: T + 6, ended_at: T + 8 },
  ]);
  const by = Object.fromEntries(tl.bars.map((b) => [b.call_id, b]));
  assert.equal(by.s1.gapBefore, null);
  assert.equal(by.m2.gapBefore, 3);
});

test('calls without a first token or an end', () => {
  const tl = computeTimeline(
    [
      { call_id: 'failed', started_at: T, first_token_at: null, ended_at: T + 2 },
      { call_id: 'open', started_at: T + 2, first_token_at: T + 3, ended_at: null },
      { call_id: 'untimed', started_at: null },
    ],
    T + 5,
  );
  assert.equal(tl.bars.length, 2);
  assert.equal(tl.span, 5);
  const [f, o] = tl.bars;
  assert.ok(close(f.ttft, 40) && f.decode === 0);
  assert.equal(o.open, true);
  assert.ok(close(o.left, 40) && close(o.ttft, 20) && close(o.decode, 40));
});

test('empty and zero-length timelines', () => {
  assert.deepEqual(computeTimeline([]), { t0: null, span: 0, bars: [] });
  const tl = computeTimeline([{ call_id: 'x', started_at: T, first_token_at: T, ended_at: T }]);
  assert.equal(tl.span, 0);
  assert.equal(tl.bars[0].left, 0);
  assert.equal(tl.bars[0].ttft, 0);
});

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { breakGaps, segmentRuns, segmentTrainable, surprisalData, tokenTitle, trajectoryStats } from '../src/logic/tokens.js';

function toks(mask, special = []) {
  return {
    id: mask.map((_, i) => 100 + i),
    text: mask.map((_, i) => 't' + i),
    mask,
    logprob: mask.map((m, i) => (m ? -0.1 * i : null)),
    special: mask.map((_, i) => !!special[i]),
  };
}

const runs = (v) => v.pieces.map((p) => (p.type === 'run' ? `${p.cls}[${p.start},${p.end})` : p.type === 'call' ? `call:${p.call_id}@${p.at}` : `collapsed[${p.start},${p.end})`));

test('groups consecutive tokens by mask and special flag', () => {
  const v = segmentRuns(toks([0, 0, 1, 1, 1, 0], [false, true]));
  assert.deepEqual(runs(v), ['t m0[0,1)', 't m0 sp[1,2)', 't m1[2,5)', 't m0[5,6)']);
  assert.equal(v.shown, 6);
  assert.equal(v.remaining, 0);
});

test('call starts split runs and put a marker before the token', () => {
  const v = segmentRuns(toks([0, 1, 1, 1, 1]), { callStarts: [{ at: 1, call_id: 'c1' }, { at: 3, call_id: 'c2' }] });
  assert.deepEqual(runs(v), ['t m0[0,1)', 'call:c1@1', 't m1[1,3)', 'call:c2@3', 't m1[3,5)']);
  // A call starting at the very end (empty completion) still shows.
  const end = segmentRuns(toks([0, 0]), { callStarts: [{ at: 2, call_id: 'c9' }] });
  assert.deepEqual(runs(end), ['t m0[0,2)', 'call:c9@2']);
});

test('the collapsed prefix is one piece until expanded', () => {
  const t = toks([0, 0, 0, 0, 1, 1]);
  const folded = segmentRuns(t, { collapsed: [0, 4], callStarts: [{ at: 4, call_id: 'c1' }] });
  assert.deepEqual(runs(folded), ['collapsed[0,4)', 'call:c1@4', 't m1[4,6)']);
  assert.equal(folded.pieces[0].count, 4);
  assert.equal(folded.shown, 2);
  assert.equal(folded.remaining, 0);
  const open = segmentRuns(t, { collapsed: [0, 4], expanded: true });
  assert.deepEqual(runs(open), ['t m0[0,4)', 't m1[4,6)']);
  // A collapsed range in the middle, and an empty or out-of-range one.
  assert.deepEqual(runs(segmentRuns(t, { collapsed: [1, 3] })), ['t m0[0,1)', 'collapsed[1,3)', 't m0[3,4)', 't m1[4,6)']);
  assert.deepEqual(runs(segmentRuns(t, { collapsed: [3, 3] })), ['t m0[0,4)', 't m1[4,6)']);
  assert.deepEqual(runs(segmentRuns(t, { collapsed: [4, 99] })), ['t m0[0,4)', 'collapsed[4,6)']);
});

test('the render limit stops after N tokens and reports what is left', () => {
  const mask = Array.from({ length: 10000 }, (_, i) => (i % 100 < 50 ? 0 : 1));
  const v = segmentRuns(toks(mask), { limit: 4000 });
  assert.equal(v.shown, 4000);
  assert.equal(v.remaining, 6000);
  const last = v.pieces[v.pieces.length - 1];
  assert.equal(last.end, 4000);
  const more = segmentRuns(toks(mask), { limit: 8000 });
  assert.equal(more.shown, 8000);
  assert.equal(more.remaining, 2000);
  // The folded prefix is not counted against the limit, nor as remaining.
  const folded = segmentRuns(toks(mask), { limit: 4000, collapsed: [0, 1800] });
  assert.equal(folded.shown, 4000);
  assert.equal(folded.pieces.filter((p) => p.type === 'run').at(-1).end, 5800);
  assert.equal(folded.remaining, 10000 - 5800);
  // Limit reached before a collapsed range further on: it is not counted as remaining.
  const before = segmentRuns(toks(mask), { limit: 100, collapsed: [5000, 6000] });
  assert.equal(before.remaining, 10000 - 100 - 1000);
});

test('tokenTitle', () => {
  assert.equal(tokenTitle(1234, -0.12344), 'id 1234 · logprob -0.1234');
  assert.equal(tokenTitle(7, null), 'id 7');
  assert.equal(tokenTitle(7, undefined), 'id 7');
});

test('surprisal covers mask-1 tokens with a logprob, across segments', () => {
  const a = { tokens: { id: [1, 2, 3, 4], mask: [0, 1, 1, 1], logprob: [-5, -0.5, null, 0] } };
  const b = { tokens: { id: [5, 6], mask: [1, 0], logprob: [-2, -3] } };
  const [xs, ys] = surprisalData([a, b]);
  assert.deepEqual(xs, [1, 3, 4]);
  assert.deepEqual(ys, [0.5, 0, 2]);
  assert.ok(!Object.is(ys[1], -0), 'no negative zero');
  assert.deepEqual(surprisalData([]), [[], []]);
});

test('surprisal keeps positions in the segment when its head was not sent', () => {
  const a = { first: 10, total_tokens: 14, tokens: { id: [1, 2, 3, 4], mask: [0, 1, 1, 0], logprob: [null, -1, -2, null] } };
  const b = { total_tokens: 2, tokens: { id: [5, 6], mask: [1, 0], logprob: [-3, null] } };
  assert.deepEqual(surprisalData([a, b]), [[11, 12, 14], [1, 2, 3]]);
});

test('a segment counts its trainable tokens as the server does, sent or not', () => {
  assert.equal(segmentTrainable({ trainable_tokens: 7, tokens: { id: [1], mask: [0] } }), 7);
  assert.equal(segmentTrainable({ tokens: { id: [1, 2, 3], mask: [1, 0, 1] } }), 2);
  assert.equal(segmentTrainable({}), 0);
});

test('breakGaps inserts a null after each run so the line breaks over skipped tokens', () => {
  assert.deepEqual(breakGaps([[1, 2, 5, 6, 9], [0.1, 0.2, 0.5, 0.6, 0.9]]), [
    [1, 2, 3, 5, 6, 7, 9],
    [0.1, 0.2, null, 0.5, 0.6, null, 0.9],
  ]);
  assert.deepEqual(breakGaps([[], []]), [[], []]);
});

test('trajectoryStats counts segments, tokens and trainable tokens', () => {
  const st = trajectoryStats({
    calls: [{}, {}],
    segments: [
      { total_tokens: 10, tokens: { id: [1, 2, 3], mask: [0, 1, 1] } },
      { tokens: { id: [1, 2], mask: [1, 0] } },
    ],
  });
  assert.deepEqual(st, { segments: 2, calls: 2, tokens: 12, shownTokens: 5, trainable: 3 });
  // The whole segment's count where the server sends it (a long segment is sent in part).
  const cut = trajectoryStats({ segments: [{ total_tokens: 90, trainable_tokens: 40, tokens: { id: [1], mask: [0] } }] });
  assert.equal(cut.trainable, 40);
  assert.deepEqual(trajectoryStats({}), { segments: 0, calls: 0, tokens: 0, shownTokens: 0, trainable: 0 });
});

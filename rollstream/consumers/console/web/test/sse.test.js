import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createSSEParser } from '../src/logic/sse.js';

function collect(chunks) {
  const events = [];
  const p = createSSEParser((e) => events.push(e));
  for (const c of chunks) p.feed(c);
  return events;
}

const STREAM = ': hello\nevent: fleet\ndata: {"a":1}\n\nevent: fleet\ndata: line1\ndata: line2\n\ndata: plain\n\n';

test('parses named events, multi-line data and comments', () => {
  const ev = collect([STREAM]);
  assert.deepEqual(
    ev.map((e) => [e.event, e.data]),
    [
      ['fleet', '{"a":1}'],
      ['fleet', 'line1\nline2'],
      ['message', 'plain'],
    ],
  );
});

test('gives the same events however the stream is split', () => {
  const whole = collect([STREAM]);
  for (let i = 0; i <= STREAM.length; i++) {
    assert.deepEqual(collect([STREAM.slice(0, i), STREAM.slice(i)]), whole, `split at ${i}`);
  }
  assert.deepEqual(collect([...STREAM]), whole, 'one character at a time');
});

test('handles CRLF and lone CR line endings, including CRLF split across chunks', () => {
  const crlf = STREAM.replace(/\n/g, '\r\n');
  const cr = STREAM.replace(/\n/g, '\r');
  const whole = collect([STREAM]);
  assert.deepEqual(collect([crlf]), whole);
  assert.deepEqual(collect([cr]), whole);
  for (let i = 0; i <= crlf.length; i++) {
    assert.deepEqual(collect([crlf.slice(0, i), crlf.slice(i)]), whole, `CRLF split at ${i}`);
  }
  assert.deepEqual(collect([...crlf]), whole);
});

test('does not dispatch until the blank line, and drops an unfinished event', () => {
  const events = [];
  const p = createSSEParser((e) => events.push(e));
  p.feed('event: fleet\ndata: {"x":');
  p.feed('2}\n');
  assert.equal(events.length, 0);
  p.feed('\n');
  assert.deepEqual(events.map((e) => e.data), ['{"x":2}']);
  p.feed('event: fleet\ndata: never finished\n');
  assert.equal(events.length, 1);
});

test('field details: no space after colon, empty data, event with no data, id, BOM', () => {
  const ev = collect(['\uFEFFdata:nospace\n\n', 'data\n\n', 'event: x\n\n', 'id: 7\nevent: e\ndata:  two spaces\n\n']);
  assert.deepEqual(ev.map((e) => e.data), ['nospace', '', ' two spaces']);
  assert.equal(ev[2].event, 'e');
  assert.equal(ev[2].id, '7');
  // The event type does not leak into the next event.
  const ev2 = collect(['event: fleet\n\ndata: after\n\n']);
  assert.deepEqual(ev2.map((e) => e.event), ['message']);
});

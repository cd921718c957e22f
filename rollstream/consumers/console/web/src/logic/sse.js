// Incremental parser for the text/event-stream format.
// The live source reads api/stream with fetch (EventSource cannot send an
// Authorization header), so we parse the stream ourselves. Chunks arrive split
// at arbitrary points — mid-line, mid-field, even between the CR and LF of a
// CRLF — so the parser keeps the unfinished line between calls.

/**
 * @param {(ev: {event: string, data: string, id: string}) => void} onEvent
 * @returns {{feed(chunk: string): void}}
 */
export function createSSEParser(onEvent) {
  let buf = '';
  let first = true;
  // A chunk that ended in CR may be the first half of a CRLF pair.
  let skipLF = false;
  let eventType = '';
  let dataLines = [];
  let lastId = '';

  function dispatch() {
    // An event with no data field is dropped, per the spec.
    if (dataLines.length > 0) {
      onEvent({ event: eventType || 'message', data: dataLines.join('\n'), id: lastId });
    }
    eventType = '';
    dataLines = [];
  }

  function line(l) {
    if (l === '') return dispatch();
    if (l[0] === ':') return; // comment, used by servers as keep-alive
    const colon = l.indexOf(':');
    const field = colon === -1 ? l : l.slice(0, colon);
    let value = colon === -1 ? '' : l.slice(colon + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'event') eventType = value;
    else if (field === 'data') dataLines.push(value);
    else if (field === 'id' && !value.includes('\0')) lastId = value;
    // 'retry' and unknown fields are ignored: we reconnect on our own schedule.
  }

  function feed(chunk) {
    if (!chunk) return;
    if (first) {
      first = false;
      if (chunk[0] === '\uFEFF') chunk = chunk.slice(1);
    }
    if (skipLF && chunk[0] === '\n') chunk = chunk.slice(1);
    skipLF = false;
    buf += chunk;
    let start = 0;
    for (let i = 0; i < buf.length; i++) {
      const c = buf[i];
      if (c !== '\n' && c !== '\r') continue;
      line(buf.slice(start, i));
      if (c === '\r') {
        if (i + 1 < buf.length) {
          if (buf[i + 1] === '\n') i++;
        } else {
          skipLF = true;
        }
      }
      start = i + 1;
    }
    buf = buf.slice(start);
  }

  return { feed };
}

// Developer aid: a stand-in for the console server, answering the API from the
// sample data (via the static source, so paging and filtering match), with the
// SSE stream and the controls. Build first, then:
//   node dev/fake-server.mjs [port]
// and open http://127.0.0.1:PORT/#token=dev (or #token=devctl for controls).
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createStaticSource } from '../src/sources/static.js';
import { data } from './sample-data.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const port = Number(process.argv[2] || 8765);
const TOKENS = { dev: false, devctl: true }; // token → control
const source = createStaticSource(data);

const PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>rollstream console</title>
<link rel="stylesheet" href="static/console.css"></head>
<body><div id="app"></div><script src="static/console.js"></script></body></html>`;

function send(res, status, body, type = 'application/json') {
  res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store' });
  res.end(type === 'application/json' ? JSON.stringify(body) : body);
}

function fleetNow() {
  return { ...data.fleet, now: Date.now() / 1000 };
}

createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
  const path = url.pathname.replace(/^\/+/, '');
  if (path === '') return send(res, 200, PAGE, 'text/html; charset=utf-8');
  if (path === 'static/console.js' || path === 'static/console.css') {
    const type = path.endsWith('.js') ? 'text/javascript' : 'text/css';
    return send(res, 200, await readFile(join(here, '../dist', path.slice('static/'.length))), type);
  }
  if (!path.startsWith('api/')) return send(res, 404, { error: 'not found' });

  const token = (req.headers.authorization || '').replace(/^Bearer /, '');
  if (!(token in TOKENS)) return send(res, 401, { error: 'this console needs the token it printed at start' });
  const control = TOKENS[token];

  if (path === 'api/stream') {
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store' });
    const tick = () => res.write(`event: fleet\ndata: ${JSON.stringify(fleetNow())}\n\n`);
    tick();
    const timer = setInterval(tick, 1000);
    req.on('close', () => clearInterval(timer));
    return undefined;
  }
  if (path === 'api/whoami') return send(res, 200, { control });
  if (path === 'api/fleet') return send(res, 200, fleetNow());
  if (path.startsWith('api/control/')) {
    if (!control) return send(res, 403, { error: 'controls need the control token' });
    const action = path.slice('api/control/'.length);
    if (action === 'pause' || action === 'resume') return send(res, 200, { ok: true, results: [{ url: 'http://127.0.0.1:9091', ok: true }] });
    if (action === 'export') return send(res, 200, { ok: true, path: '/tmp/export.parquet', rows: 12 });
    if (action === 'replay') return send(res, 400, { error: 'replay is not available in the fake server' });
    return send(res, 404, { error: 'no such control' });
  }
  try {
    return send(res, 200, await source.get(path, Object.fromEntries(url.searchParams)));
  } catch (e) {
    return send(res, e.status || 500, { error: e.message });
  }
}).listen(port, '127.0.0.1', () => console.log(`http://127.0.0.1:${port}/#token=devctl`));

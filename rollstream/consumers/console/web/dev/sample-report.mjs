// Developer aid: write a static report with made-up data to look at the
// console without a server. Build first (node build.mjs), then:
//   node dev/sample-report.mjs [/tmp/console-sample.html]
// and open the file in a browser (append #/groups, #/trajectory/traj-0, ...).
// SAMPLE_TOKENS=20000 makes the sample trajectory long (to try "show more").
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { data } from './sample-data.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] || '/tmp/console-sample.html';

const css = await readFile(join(here, '../dist/console.css'), 'utf8');
const js = await readFile(join(here, '../dist/console.js'), 'utf8');
// "</" inside the JSON would close the script element; "<\/" is the same JSON string.
const json = JSON.stringify(data).replace(/<\//g, '<\\/');
const html = `<!doctype html><html><head><meta charset="utf-8"><title>rollstream console</title>
<style>${css}</style></head>
<body><div id="app"></div>
<script id="rollstream-data" type="application/json">${json}</script>
<script>${js}</script></body></html>
`;
await writeFile(out, html);
console.log(`wrote ${out} (${(html.length / 1024).toFixed(1)} KiB)`);

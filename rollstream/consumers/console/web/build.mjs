// Bundle the console into dist/console.js (one IIFE) and dist/console.css
// (ours plus uPlot's). Run from this folder: `npm ci && node build.mjs`.
import { build } from 'esbuild';
import { readFile, mkdir, writeFile, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, 'dist');
const require = createRequire(import.meta.url);

await mkdir(dist, { recursive: true });

await build({
  entryPoints: [join(here, 'src/main.js')],
  outfile: join(dist, 'console.js'),
  bundle: true,
  format: 'iife',
  target: 'es2020',
  minify: true,
  sourcemap: false,
  legalComments: 'eof', // Preact's and uPlot's licence notices travel with the bundle
  logLevel: 'warning',
});

// The report inlines the bundle in a <script> element, where "</script" would
// end the element early.
const js = await readFile(join(dist, 'console.js'), 'utf8');
if (/<\/script/i.test(js)) {
  console.error('dist/console.js contains "</script": it cannot be inlined in the report');
  process.exit(1);
}

// uPlot's stylesheet first so our rules can override it.
const uplotCss = await readFile(require.resolve('uplot/dist/uPlot.min.css'), 'utf8');
const ours = await readFile(join(here, 'src/console.css'), 'utf8');
const css = await build({
  stdin: { contents: uplotCss + '\n' + ours, loader: 'css', resolveDir: here },
  write: false,
  minify: true,
  logLevel: 'warning',
});
await writeFile(join(dist, 'console.css'), css.outputFiles[0].text);
if (/<\/style/i.test(css.outputFiles[0].text)) {
  console.error('dist/console.css contains "</style": it cannot be inlined in the report');
  process.exit(1);
}

for (const f of ['console.js', 'console.css']) {
  const { size } = await stat(join(dist, f));
  console.log(`dist/${f}  ${(size / 1024).toFixed(1)} KiB (${size} bytes)`);
}

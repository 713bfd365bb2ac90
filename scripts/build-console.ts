// Builds the operator console (console/) into dist/console/: one esbuild bundle
// of the preact app and the CSS file, each named by its content hash (so they
// can be cached for a year), and index.html naming them. Run by `npm run build`
// after tsc; the browser test calls buildConsole() itself.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/** The package root, from scripts/ in the source tree or dist/scripts/ once built. */
const ROOT = fileURLToPath(new URL(import.meta.url.includes('/dist/scripts/') ? '../../' : '../', import.meta.url));

function hashed(name: string, ext: string, body: Uint8Array): string {
  return `${name}-${createHash('sha256').update(body).digest('hex').slice(0, 8).toUpperCase()}.${ext}`;
}

export async function buildConsole(root = ROOT, outDir = `${root}dist/console/`): Promise<string> {
  const result = await build({
    entryPoints: [`${root}console/main.tsx`],
    bundle: true,
    format: 'esm',
    target: 'es2022',
    minify: true,
    jsx: 'automatic',
    jsxImportSource: 'preact',
    write: false,
    legalComments: 'none',
    logLevel: 'warning',
  });
  const js = result.outputFiles[0]!.contents;
  const css = readFileSync(`${root}console/styles.css`);
  const jsName = hashed('app', 'js', js);
  const cssName = hashed('styles', 'css', css);
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  writeFileSync(`${outDir}${jsName}`, js);
  writeFileSync(`${outDir}${cssName}`, css);
  const index = readFileSync(`${root}console/index.html`, 'utf8').replace('{{JS}}', jsName).replace('{{CSS}}', cssName);
  writeFileSync(`${outDir}index.html`, index);
  return outDir;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const dir = await buildConsole();
  console.log(`console built into ${dir}`);
}

// The split-mode proxy under `wrk -c64` (the bench's setup: ClickHouse over HTTP
// and the admin in processes of their own), with a heap profile of what it
// promotes (promoted.cjs), summed by allocation site, deepest frame first:
//   node bench/profile/promoted.mjs [small|64k|post] [seconds, default 20]
// after `npm run build`; prints MB over the sampled seconds and the share of each
// site. docs/performance.md, "The audit batch off the V8 heap". Loopback only.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const workload = process.argv[2] ?? 'small';
const seconds = Number(process.argv[3] ?? 20);
const tmp = mkdtempSync(join(tmpdir(), 'promoted-'));
const out = join(tmp, 'promoted.heapprofile');
// The proxy starts within ~3 s here; sampling starts once the load has warmed it up.
Object.assign(process.env, {
  NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require ${join(root, 'bench/profile/promoted.cjs')}`,
  PROMOTED_OUT: out,
  PROMOTED_START_MS: '6000',
  PROMOTED_STOP_MS: String(6000 + seconds * 1000),
});
const { startUpstream } = await import(join(root, 'dist/bench/launch/upstream.js'));
const { startGuardSplit } = await import(join(root, 'dist/bench/launch/guard-split.js'));
const upstream = await startUpstream();
const guard = await startGuardSplit(tmp, upstream.authority, 'bench-bearer');
writeFileSync(join(tmp, 'post.lua'), 'wrk.method="POST"\nwrk.body=string.rep("x",16384)\nwrk.headers["Content-Type"]="application/octet-stream"\n');
const target = workload === 'post' ? ['-s', join(tmp, 'post.lua'), `${guard.origin}${guard.pathFor('/sink')}`] : [`${guard.origin}${guard.pathFor(workload === '64k' ? '/64k' : '/small')}`];
const wrk = execFileSync('wrk', ['-t1', '-c64', `-d${seconds + 10}s`, ...target]).toString();
const requests = Number(/(\d+) requests in/.exec(wrk)?.[1]);
await new Promise((resolve) => setTimeout(resolve, 3000));
const profile = JSON.parse(readFileSync(out, 'utf8'));
const bySite = new Map();
let total = 0;
const walk = (node, stack) => {
  const f = node.callFrame;
  const frames = [...stack, `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`];
  if (node.selfSize > 0) {
    const site = frames.slice(-4).reverse().join(' < ');
    bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
    total += node.selfSize;
  }
  for (const child of node.children) walk(child, frames);
};
walk(profile.head, []);
console.log(`${workload}: ${(total / 1e6).toFixed(1)} MB promoted or retained over ~${seconds} s; ~${requests} requests in the ${seconds + 10} s load (${((total / requests) * ((seconds + 10) / seconds)).toFixed(0)} bytes a call)`);
for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
  console.log(`${(bytes / 1e6).toFixed(2).padStart(7)} MB ${((100 * bytes) / total).toFixed(1).padStart(5)} %  ${site}`);
}
process.exit(0);

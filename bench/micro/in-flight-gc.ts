// What the proxy's list of exchanges in flight makes the garbage collector
// keep: exchange-sized objects go in and out of a Set, as pipeline.ts's list
// once did, and of InFlight (proxy/in-flight.ts), 64 at a time as under wrk -c64,
// with a scavenge every 640 calls (as under load: one per ~45 ms). It prints the
// bytes that reached the old space per 1,000 calls. Each run is a process of
// its own: V8 learns from one list's survivors to allocate the next one's
// exchanges in the old space at once (allocation-site pretenuring).
//
// A Set keeps each hash table it replaces, entries and all, linked to the next;
// once one is in the old space, that link keeps every later table and its
// exchanges alive through scavenges, so they are promoted. Under the bench's
// load this was ~1 KB of the ~2.3 promoted per call (docs/performance.md).
//   npm run bench:in-flight-gc
import { execFileSync } from 'node:child_process';
import v8 from 'node:v8';
import { fileURLToPath } from 'node:url';
import { InFlight } from '../../proxy/in-flight.js';

const gc = (globalThis as { gc?: (options?: { type: 'minor' | 'major' }) => void }).gc;
if (gc === undefined) throw new Error('run with node --expose-gc (npm run bench:in-flight-gc)');

type Exchange = { inFlightSlot: number; payload: number[] };
interface List { add(ex: Exchange): void; delete(ex: Exchange): void }

const CONCURRENT = 64;
const ROUNDS = 400;
const oldUsed = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'old_space')!.space_used_size;

function promotedPerThousand(make: () => List): number {
  gc!();
  const list = make();
  const live: Exchange[] = [];
  const exchange = (i: number): Exchange => ({ inFlightSlot: -1, payload: new Array(100).fill(i) });
  for (let i = 0; i < CONCURRENT; i++) {
    const ex = exchange(i);
    list.add(ex);
    live.push(ex);
  }
  // The list's own structure has been there a while: it is in the old space.
  gc!({ type: 'minor' });
  gc!({ type: 'minor' });
  const before = oldUsed();
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < CONCURRENT; i++) {
      const ex = exchange(i);
      list.add(ex);
      list.delete(live[i]!);
      live[i] = ex;
    }
    if (round % 10 === 9) gc!({ type: 'minor' });
  }
  return ((oldUsed() - before) / (ROUNDS * CONCURRENT)) * 1000;
}

const variant = process.argv[2];
if (variant === 'Set' || variant === 'InFlight') {
  process.stdout.write(String(promotedPerThousand(() => (variant === 'Set' ? new Set<Exchange>() : (new InFlight() as unknown as List)))));
} else {
  const self = fileURLToPath(import.meta.url);
  const runs: Record<string, number[]> = { Set: [], InFlight: [] };
  for (let run = 0; run < 5; run++) {
    for (const name of ['Set', 'InFlight']) runs[name]!.push(Number(execFileSync(process.execPath, ['--expose-gc', self, name], { encoding: 'utf8' })));
  }
  console.log('| list | KB reaching the old space per 1,000 calls (5 runs, a process each) |');
  console.log('|---|---|');
  for (const [name, values] of Object.entries(runs)) console.log(`| ${name} | ${values.map((v) => (v / 1024).toFixed(0)).join(', ')} |`);
}

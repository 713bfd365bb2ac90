// The rate limiter's memory at one million agents, each with one counter: what
// the counters add to the heap (and to the typed arrays they live in) and to
// the RSS. Fails above 200 MB of heap + arrayBuffers.
//   npm run bench:limits-memory
import { randomUUID } from 'node:crypto';
import { parsePolicy } from '../../shared/policy/index.js';
import { RateLimiter } from '../../proxy/rate-limiter.js';

const AGENTS = 1_000_000;
const MAX_HEAP_MB = 200;
const MB = 1024 * 1024;

const gc = globalThis.gc;
if (gc === undefined) {
  console.error('run with node --expose-gc: the figures are only meaningful after a full collection');
  process.exit(1);
}

/** Heap plus typed arrays (the counters' counts live outside the JS heap), and RSS, after a full GC. */
function memory(): { heap: number; rss: number } {
  gc!();
  const { heapUsed, arrayBuffers, rss } = process.memoryUsage();
  return { heap: heapUsed + arrayBuffers, rss };
}

const { limits } = parsePolicy(`version: "1"
rules: []
limits:
  - name: per-minute
    tool: "*"
    rate: 10/minute
`);
// The ids belong to the agents, not to the limiter (which keeps references to them): made before the baseline.
const agentIds = Array.from({ length: AGENTS }, () => randomUUID());

const before = memory();
const limiter = new RateLimiter({ maxCounters: 2 * AGENTS });
for (const agentId of agentIds) limiter.decide(agentId, limits, 'api.example.com', 'GET', '/');
const after = memory();

const heapMB = (after.heap - before.heap) / MB;
const rssMB = (after.rss - before.rss) / MB;
console.log(`counters: ${limiter.size.toLocaleString('en-US')}`);
console.log(`heap + arrayBuffers: +${heapMB.toFixed(1)} MB`);
console.log(`rss: +${rssMB.toFixed(1)} MB`);
console.log(`bytes per counter: ${((after.heap - before.heap) / limiter.size).toFixed(0)}`);
console.log(heapMB <= MAX_HEAP_MB ? 'PASS' : 'FAIL');

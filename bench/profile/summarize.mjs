// Groups a main-thread CPU profile (node --cpu-prof) by stage of a proxied call
// (bench/profile/stages.ts; run `npm run build` first) and prints µs per request:
// the table in docs/performance.md.
// Usage: node bench/profile/summarize.mjs <file.cpuprofile> <requests served>
import { readFileSync } from 'node:fs';
import { profileStages } from '../../dist/bench/profile/stages.js';

const profile = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const requests = Number(process.argv[3]);
const stages = profileStages(profile);
const total = [...stages.values()].reduce((a, b) => a + b, 0);
console.log('total profile s', (total / 1e6).toFixed(2), 'requests', requests);
for (const [name, us] of stages) console.log(`| ${name} | ${(us / requests).toFixed(1)} | ${(us / total * 100).toFixed(0)} % |`);

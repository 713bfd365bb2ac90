// Micro-benchmarks of the proxy's per-call pieces that are ours (not uWS's,
// undici's or TLS's): what each costs in ns per call, in this process, after a
// warm-up. `npm run bench:micro` runs every file below, one after the other in
// this process, and prints one table; each file also runs alone
// (`node dist/bench/micro/<file>.js`). Numbers vary with the machine: compare
// runs side by side, and read docs/performance.md for the whole call.
import { measureAuditEncoding } from './audit-encoding.js';
import { measureAuditJournal } from './audit-journal.js';
import { measureClassifyAddress } from './classify-address.js';
import { measureEvaluatePolicy } from './evaluate-policy.js';
import { measureHeaderCopy } from './header-copy.js';
import { measureKeyLookup } from './key-lookup.js';
import { measureMcpBody } from './mcp-body.js';
import { measureOutputHash } from './output-hash.js';
import { measureParseTarget } from './parse-target.js';
import { measureRateLimiter } from './rate-limiter.js';
import { measureSeal } from './seal.js';
import { measureSseEndpoint } from './sse-endpoint.js';
import { resultTable, type MicroCases, type Result } from './measure.js';

/** Every hot function's file, in the order a call meets them. */
const FILES: readonly (readonly [string, MicroCases])[] = [
  ['header-copy.ts', measureHeaderCopy],
  ['key-lookup.ts', measureKeyLookup],
  ['parse-target.ts', measureParseTarget],
  ['evaluate-policy.ts', measureEvaluatePolicy],
  ['mcp-body.ts', measureMcpBody],
  ['rate-limiter.ts', measureRateLimiter],
  ['classify-address.ts', measureClassifyAddress],
  ['output-hash.ts', measureOutputHash],
  ['sse-endpoint.ts', measureSseEndpoint],
  ['audit-encoding.ts', measureAuditEncoding],
  ['seal.ts', measureSeal],
  ['audit-journal.ts', measureAuditJournal],
];

const groups: { heading: string; results: Result[] }[] = [];
for (const [file, cases] of FILES) groups.push({ heading: `bench/micro/${file}`, results: await cases() });
console.log(resultTable(groups));

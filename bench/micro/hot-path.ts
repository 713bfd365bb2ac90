// Micro-benchmarks of the proxy's per-call pieces that are ours (not uWS's,
// undici's or TLS's): what each costs in ns per call, in this process, after a
// warm-up. `npm run bench:micro`. Numbers vary with the machine: compare runs
// side by side, and read docs/performance.md for the whole call.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AuditJournal } from '../../shared/audit/audit-journal.js';
import { encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { entryHash } from '../../shared/audit/entry-json.js';
import { freshSealedFields, Sealer, signingKeyFromPem } from '../../shared/audit/seal.js';
import { evaluatePolicy, parsePolicy } from '../../shared/policy/index.js';
import { normalizePolicyPath, parseTarget } from '../../shared/target.js';
import type { AuditRecord } from '../../shared/types.js';
import { RateLimiter } from '../../proxy/rate-limiter.js';
import { classifyAddress } from '../../proxy/ssrf-rules.js';
import { BENCH_POLICY } from '../policy.js';

interface Result {
  name: string;
  nsPerOp: number;
}

/** Runs `op` in batches for about `ms` after a warm-up; ns per call, the best of 5 batches. */
function measure(name: string, op: (i: number) => unknown, ms = 300): Result {
  let sink: unknown;
  for (let i = 0; i < 20_000; i++) sink = op(i);
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    let n = 0;
    const start = performance.now();
    let now = start;
    while (now - start < ms / 5) {
      for (let i = 0; i < 1000; i++) sink = op(n + i);
      n += 1000;
      now = performance.now();
    }
    best = Math.min(best, ((now - start) * 1e6) / n);
  }
  if (sink === Symbol.for('never')) console.log(sink);
  return { name, nsPerOp: best };
}

const policy = parsePolicy(BENCH_POLICY);
const record: AuditRecord = {
  id: '0b7c1d7e-3f0a-4c52-9a43-5b7f0e6f2a11',
  timestamp: '2026-11-24T12:00:00.000Z',
  orgId: '5d0c5a9e-8d6f-4b0b-a2a8-2d1f8e0c7b33',
  agentId: '9a41c3e8-0b7c-4c52-9a43-5b7f0e6f2a11',
  agentName: 'bench-agent',
  toolName: '127.0.0.1',
  action: 'GET',
  toolUrl: 'https://127.0.0.1:8443/small',
  decision: 'allowed',
  reasoning: 'why this call',
  taskId: 'task-1',
  latencyMs: 3,
  statusCode: 200,
  ruleMatched: 'bench-upstream',
  source: 'proxy',
  requestBytes: 0,
  responseBytes: 211,
  outputHash: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  output: null,
  outputTruncated: false,
  requestId: '7f1e0c52-2b7d-4f4c-8f8e-0f0b1f1d2c3a',
  mcpSessionId: null,
  mcpMethod: null,
  mcpTool: null,
  shadowRule: null,
  shadowDecision: null,
  policyPath: '/small',
  policyDecided: true,
  approvalId: null,
  timestampMs: Date.parse('2026-11-24T12:00:00.000Z'),
};

/** The compiled `limits` of a rule-less policy, one per [name, tool glob, rate]. */
function limitsOf(...limits: [string, string, string][]) {
  const yaml = limits.map(([name, tool, rate]) => `  - name: ${name}\n    tool: "${tool}"\n    rate: ${rate}\n`).join('');
  return parsePolicy(`version: "1"\nrules: []\nlimits:\n${yaml}`).limits;
}
// Rates the run cannot use up, so that every call is admitted (and counted), except under used-up.
const warmLimits = limitsOf(['warm', '*', '1000000000/second']);
const usedUpLimits = limitsOf(['used-up', '*', '1/hour']);
const fiveLimits = limitsOf(
  ...['a', 'b', 'c', 'd'].map((h): [string, string, string] => [h, `${h}.example.com`, '1000000000/second']),
  ['bench', '127.0.0.1', '1000000000/second'],
);
const manyLimits = limitsOf(['many', '*', '1000000/minute']);
const warmLimiter = new RateLimiter({ maxCounters: 10 });
const usedUpLimiter = new RateLimiter({ maxCounters: 10 });
usedUpLimiter.decide(record.agentId, usedUpLimits, '127.0.0.1', 'GET', '/small'); // the hour's one call
const fiveLimiter = new RateLimiter({ maxCounters: 10 });
const manyLimiter = new RateLimiter({ maxCounters: 200_000 });
const agentIds = Array.from({ length: 100_000 }, () => randomUUID());

const sealer = new Sealer(signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()));
const sealBatchId = randomUUID();
// As a batch holds them: queued as calls end, in the order they ended. Under
// load (bench/profile/run.sh: ~14 calls a millisecond, 64 at once, a few ms
// each) a call's timestamp (when it began) is out of order by up to its latency.
const sealStart = Date.parse(record.timestamp);
// The records keep the shape of `record` (the proxy's own, toAuditRecord's literal):
// a property added to a spread copy leaves V8 a slower shape, on which the
// encoders' field reads alone cost ~2 µs more (measured).
// Most agents send no X-Request-Id: the record's request id is then its own id
// (one call in four here sends one).
const endsAt = (i: number) => i / 14 + 1 + ((i * 7919) % 50) / 10;
const sealRecords = Array.from({ length: 250 }, (_, i) => i)
  .sort((a, b) => endsAt(a) - endsAt(b))
  .map((i): AuditRecord => {
    const id = randomUUID();
    return { ...record, id, requestId: i % 4 === 0 ? randomUUID() : id, latencyMs: i % 7, timestamp: new Date(sealStart + Math.floor(i / 14)).toISOString(), timestampMs: sealStart + Math.floor(i / 14) };
  });
const sealBatch = sealRecords.map((r) => encodeAuditRow(r, sealBatchId));
const sealFields = sealBatch.map((l, i) => freshSealedFields(l, sealRecords[i]!, sealBatchId));

const dir = mkdtempSync(join(tmpdir(), 'tcg-micro-'));
const { journal } = AuditJournal.open(dir);
const line = encodeAuditRow(record);
const waiter = { journaled: () => undefined };

const results = [
  measure('parseTarget (authority cached)', () => parseTarget('127.0.0.1:8443/small?x=1')),
  measure('normalizePolicyPath', () => normalizePolicyPath('/repos/a/b/issues')),
  measure('evaluatePolicy (2 rules)', () => evaluatePolicy(policy, '127.0.0.1', 'GET', '/small')),
  measure('classifyAddress (public IPv4)', () => classifyAddress('93.184.216.34')),
  // Over the 250 calls below: each its own id and request id, ~14 a millisecond, the
  // agent, tool and rule repeated (the encoders keep each text field's last form).
  measure('encodeAuditRow (entry_hash included)', (i) => encodeAuditRow(sealRecords[i % 250]!)),
  measure('entryHash (canonical JSON + SHA-256)', (i) => entryHash(sealRecords[i % 250]!)),
  // A batch of 250 rows of one org (AUDIT_BATCH_MS at ~1,000 calls/s; under load a batch holds up to a second's rows), sealed as the batcher closes it: per row.
  measure('freshSealedFields (the batcher reads a row\'s seal fields as it queues it; the proxy\'s record has its instant as a number)', (i) => freshSealedFields(sealBatch[i % 250]!, sealRecords[i % 250]!, sealBatchId)),
  measure('Sealer.sealFields (per row, 250-row batch of one org, one Ed25519 signature)', (i) => {
    if (i % 250 === 0) sealer.sealFields(sealFields);
  }),
  measure('Sealer.sealLines (per row, the same from the lines: a batch recovered from the journal)', (i) => {
    if (i % 250 === 0) sealer.sealLines(sealBatch);
  }),
  measure('RateLimiter.decide (warm counter, admitted)', () =>
    warmLimiter.decide(record.agentId, warmLimits, '127.0.0.1', 'GET', '/small'),
  ),
  measure('RateLimiter.decide (refused: 1/hour used up)', () =>
    usedUpLimiter.decide(record.agentId, usedUpLimits, '127.0.0.1', 'GET', '/small'),
  ),
  measure('RateLimiter.decide (5 limits, 1 matches)', () =>
    fiveLimiter.decide(record.agentId, fiveLimits, '127.0.0.1', 'GET', '/small'),
  ),
  measure('RateLimiter.decide (next of 100,000 agents each call)', (i) =>
    manyLimiter.decide(agentIds[i % agentIds.length]!, manyLimits, '127.0.0.1', 'GET', '/small'),
  ),
  // Under load a turn carries about a dozen records (bench/profile/run.sh: ~14,000 calls/s, ~1,100 writes/s).
  measure('journal append + afterWrite (one write(2) per 12 lines, a turn\'s; a segment sealed every 1,200)', (i) => {
    journal.append(line);
    journal.afterWrite(waiter);
    if (i % 12 === 11) journal.flush();
    if (i % 1200 === 1199) journal.seal(`t${i}`);
  }),
];
journal.close();
rmSync(dir, { recursive: true, force: true });

console.log('| piece | ns per call |');
console.log('|---|---:|');
for (const r of results) console.log(`| ${r.name} | ${r.nsPerOp.toFixed(0)} |`);

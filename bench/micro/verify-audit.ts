// Audit verification at scale: a million sealed entries of one org (batches of
// 1,000, as a busy proxy writes them) seeded into an embedded ClickHouse (chDB) in
// a temporary directory, then verifyAudit (GET /audit/verify, npm run
// verify-audit) over all of them, timed. The goal is under 10 s.
//   npm run bench:verify-audit [-- rows [batch [signature workers]]]
// A batch of 1 is an org whose calls come one per batch: a seal per entry (at
// AUDIT_BATCH_INTERVAL_MS's default of 1 s, 86,400 seals a day and writer).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { verifyAudit } from '../../shared/audit/audit-verify.js';
import { Sealer, signingKeyFromPem } from '../../shared/audit/seal.js';
import { ClickHouseAuditStore } from '../../shared/stores/clickhouse/clickhouse-audit-store.js';
import type { AuditRecord } from '../../shared/types.js';

const ROWS = Number(process.argv[2] ?? 1_000_000);
const BATCH = Number(process.argv[3] ?? 1000);
/** Worker threads checking the seals' signatures: 1 as a server (the default), more as `npm run verify-audit`. */
const WORKERS = Number(process.argv[4] ?? 1);
const INSERT_ROWS = 50_000;
const GOAL_SECONDS = 10;

const dir = mkdtempSync(join(tmpdir(), 'tcg-verify-bench-'));
const store = await ClickHouseAuditStore.open({ url: null, dataDir: dir, retentionDays: 365 });
try {
  const key = signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  const sealer = new Sealer(key);
  const orgId = randomUUID();
  const agentId = randomUUID();
  const base = Date.now() - 3 * 86_400_000;
  const seedStarted = performance.now();
  for (let start = 0; start < ROWS; start += INSERT_ROWS) {
    let body = '';
    for (let b = start; b < Math.min(ROWS, start + INSERT_ROWS); b += BATCH) {
      const batchId = randomUUID();
      const lines: string[] = [];
      for (let i = b; i < Math.min(ROWS, b + BATCH); i++) {
        const record: AuditRecord = {
          id: randomUUID(), timestamp: new Date(base + i * 200).toISOString(), orgId, agentId, agentName: 'bench',
          toolName: 'api.example.com', action: 'GET', toolUrl: `https://api.example.com/items/${i % 500}?page=2`,
          decision: i % 7 === 0 ? 'denied' : 'allowed', reasoning: 'checking the order status', taskId: 'task-42', latencyMs: 5, statusCode: 200,
          ruleMatched: 'default', source: 'proxy', requestBytes: 0, responseBytes: 211, outputHash: 'a'.repeat(64), output: null,
          outputTruncated: false, requestId: randomUUID(), mcpSessionId: null, mcpMethod: null, mcpTool: null,
          shadowRule: null, shadowDecision: null, policyPath: `/items/${i % 500}`, policyDecided: true, approvalId: null,
        };
        lines.push(store.encode(record, batchId));
      }
      body += lines.join('') + sealer.sealLines(lines).lines.join('');
    }
    await store.insertEncoded(body, randomUUID());
  }
  const seedSeconds = (performance.now() - seedStarted) / 1000;
  const keys = new Map([[key.fingerprint, key.publicKey]]);
  const times: number[] = [];
  const waits: number[] = [];
  const busy: number[] = [];
  let result;
  for (let run = 0; run < 3; run++) {
    // The longest the event loop waited meanwhile: what a proxy sharing the
    // process (all-in-one) would have stalled for.
    const delay = monitorEventLoopDelay({ resolution: 5 });
    delay.enable();
    const started = performance.now();
    const loopBefore = performance.eventLoopUtilization();
    result = await verifyAudit(store, orgId, { since: new Date(base - 1000), until: new Date(), keys, signatureWorkers: WORKERS });
    times.push((performance.now() - started) / 1000);
    // The event loop's busy time meanwhile: what it could not give a proxy sharing it.
    busy.push(performance.eventLoopUtilization(loopBefore).active / 1000);
    delay.disable();
    waits.push(delay.max / 1e6);
  }
  const best = Math.min(...times);
  console.log(`rows: ${ROWS.toLocaleString('en-US')} in ${Math.ceil(ROWS / BATCH)} sealed batches (seeded in ${seedSeconds.toFixed(1)} s)`);
  console.log(`verify: best of 3 ${best.toFixed(3)} s (runs ${times.map((s) => s.toFixed(3)).join(', ')}); goal under ${GOAL_SECONDS} s`);
  console.log(`longest event-loop wait during a run: ${waits.map((ms) => `${ms.toFixed(0)} ms`).join(', ')}`);
  console.log(`seal signatures checked by ${WORKERS} worker${WORKERS === 1 ? '' : 's'}`);
  console.log(`event loop busy during a run: ${busy.map((s) => `${s.toFixed(2)} s`).join(', ')}`);
  console.log(`ok ${result!.ok}, entries ${result!.entries}, seals ${result!.seals}, first problem ${JSON.stringify(result!.firstProblem)}`);
  console.log(best < GOAL_SECONDS && result!.ok && result!.entries === ROWS ? 'PASS' : 'FAIL');
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}

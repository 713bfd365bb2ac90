// The audit records the audit benchmarks (encoding, seal, journal) and the rate
// limiter's read: one proxied call's record, and a batch of 250 as the batcher
// holds them under load.
import { randomUUID } from 'node:crypto';
import type { AuditRecord } from '../../shared/types.js';

/** A small GET's record, built as the proxy builds it (toAuditRecord's literal, `timestampMs` included). */
export const proxyRecord: AuditRecord = {
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

/** How many records `batchRecords` holds: a batch of one org (AUDIT_BATCH_MS at ~1,000 calls/s). */
export const BATCH_SIZE = 250;

// As a batch holds them: queued as calls end, in the order they ended. Under
// load (bench/profile/run.sh: ~14 calls a millisecond, 64 at once, a few ms
// each) a call's timestamp (when it began) is out of order by up to its latency.
const sealStart = Date.parse(proxyRecord.timestamp);
// The records keep the shape of `proxyRecord` (the proxy's own, toAuditRecord's literal):
// a property added to a spread copy leaves V8 a slower shape, on which the
// encoders' field reads alone cost ~2 µs more (measured).
// Most agents send no X-Request-Id: the record's request id is then its own id
// (one call in four here sends one).
const endsAt = (i: number) => i / 14 + 1 + ((i * 7919) % 50) / 10;

/** `count` records of one agent, each its own ids, ~14 a millisecond, in the order their calls ended. */
export function recordsInEndOrder(count: number): AuditRecord[] {
  return Array.from({ length: count }, (_, i) => i)
    .sort((a, b) => endsAt(a) - endsAt(b))
    .map((i): AuditRecord => {
      const id = randomUUID();
      return { ...proxyRecord, id, requestId: i % 4 === 0 ? randomUUID() : id, latencyMs: i % 7, timestamp: new Date(sealStart + Math.floor(i / 14)).toISOString(), timestampMs: sealStart + Math.floor(i / 14) };
    });
}

/** BATCH_SIZE of them. */
export const batchRecords: readonly AuditRecord[] = recordsInEndOrder(BATCH_SIZE);

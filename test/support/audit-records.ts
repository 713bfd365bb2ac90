// A valid audit record for store tests, with any field overridden.
import { randomUUID } from 'node:crypto';
import type { AuditStore } from '../../shared/stores/audit-store.js';
import { NO_PROXY_DETAIL, type AuditRecord } from '../../shared/types.js';

export function auditRecord(orgId: string, overrides: Partial<AuditRecord> = {}): AuditRecord {
  return {
    id: randomUUID(),
    timestamp: new Date(Date.now() - 60_000).toISOString(),
    orgId,
    agentId: randomUUID(),
    agentName: 'agent',
    toolName: 'api.github.com',
    action: 'GET',
    toolUrl: 'https://api.github.com/repos/a/b',
    decision: 'allowed',
    reasoning: '',
    taskId: '',
    latencyMs: 10,
    statusCode: 200,
    ruleMatched: 'default',
    source: 'proxy',
    requestBytes: 0,
    responseBytes: 0,
    outputHash: null,
    output: null,
    outputTruncated: false,
    requestId: randomUUID(),
    ...NO_PROXY_DETAIL,
    ...overrides,
  };
}

/** Writes `count` records, `record(i)` the i-th, `perInsert` to an insert, each insert under its own dedup token. */
export async function insertRecords(store: AuditStore, count: number, perInsert: number, token: string, record: (i: number) => AuditRecord): Promise<void> {
  for (let start = 0; start < count; start += perInsert) {
    let body = '';
    for (let i = start; i < Math.min(count, start + perInsert); i++) body += store.encode(record(i));
    await store.insertEncoded(body, `${token}-${start}`);
  }
}

// The audit entry as the API returns it (GET and POST /audit), and its
// entry_hash (CONTRACT.md "Tamper-evident audit"): the lowercase hex SHA-256 of
// the entry's RFC 8785 canonical JSON, without entry_hash.
//
// The hash is computed where the row is encoded (audit-codec.ts), once, from the
// record as it will read back: a value the store keeps differently than it was
// given is hashed as it will be kept (a lone surrogate as U+FFFD, as UTF-8 stores
// it; an empty string of a column that stores null as '' as null; a timestamp
// in its millisecond ISO form), so the hash of the entry GET /audit returns is
// the one stored with it.
//
// The canonical form is built from a fixed key list instead of a general JCS
// library: the entry has only strings, nulls, booleans and safe integers, whose
// RFC 8785 forms are JSON.stringify's, and the keys are ASCII, so sorting them
// once is the RFC's ordering. A general library costs ~13 µs an entry (measured:
// `canonicalize` 5.1; the tests use 4.0, the last for Node 20); this, with the
// SHA-256, ~1.5 µs (bench/micro/audit-encoding.ts, entryHash; docs/performance.md has
// it in a profile under load). The unit test checks the two agree on random
// entries and on the RFC's vectors.
import { hash } from 'node:crypto';
import type { AuditRecord } from '../types.js';
import { compileTemplate, memoized } from './compiled-memo.js';

/** The fields of an entry, in the API's order. */
export function auditJson(r: AuditRecord) {
  return {
    id: r.id,
    timestamp: r.timestamp,
    agent_id: r.agentId,
    agent_name: r.agentName,
    tool_name: r.toolName,
    action: r.action,
    tool_url: r.toolUrl,
    decision: r.decision,
    reasoning: r.reasoning,
    task_id: r.taskId,
    latency_ms: r.latencyMs,
    status_code: r.statusCode,
    rule_matched: r.ruleMatched,
    source: r.source,
    request_bytes: r.requestBytes,
    response_bytes: r.responseBytes,
    output_hash: r.outputHash,
    output: r.output,
    output_truncated: r.outputTruncated,
    request_id: r.requestId,
    mcp_session_id: r.mcpSessionId,
    mcp_method: r.mcpMethod,
    mcp_tool: r.mcpTool,
    shadow_rule: r.shadowRule,
    shadow_decision: r.shadowDecision,
    approval_id: r.approvalId,
    // The hash the row was written with; never one recomputed here from what may have been changed.
    entry_hash: r.entryHash ?? null,
  };
}

export type AuditEntryJson = ReturnType<typeof auditJson>;

/**
 * How each hashed key's value is written: `s` a string, `u` a string that
 * needs no escaping by construction (a UUID, an enum: it is quoted as it is, a
 * third of JSON.stringify's cost), `un` such a string or null, `sn` a string or null
 * (stored as '' for null: '' reads back null), `on` the output (null kept apart
 * from '' by its presence column), `n` a safe integer, `b` a boolean, `t` the
 * timestamp, `ri` the request id: written as `s`, but most calls send none and
 * theirs is the entry's own id, a UUID quoted as it is (a new value every call,
 * so no memo helps: ~0.25 µs of JSON.stringify saved).
 */
export type Kind = 's' | 'u' | 'un' | 'sn' | 'on' | 'n' | 'b' | 't' | 'ri';

/** Every key of auditJson but entry_hash, with its record field: sorted once, below. */
const HASHED: readonly (readonly [key: keyof AuditEntryJson, field: keyof AuditRecord, kind: Kind])[] = [
  ['id', 'id', 'u'],
  ['timestamp', 'timestamp', 't'],
  ['agent_id', 'agentId', 'u'],
  ['agent_name', 'agentName', 's'],
  ['tool_name', 'toolName', 's'],
  ['action', 'action', 's'],
  ['tool_url', 'toolUrl', 's'],
  ['decision', 'decision', 'u'],
  ['reasoning', 'reasoning', 's'],
  ['task_id', 'taskId', 's'],
  ['latency_ms', 'latencyMs', 'n'],
  ['status_code', 'statusCode', 'n'],
  ['rule_matched', 'ruleMatched', 's'],
  ['source', 'source', 'u'],
  ['request_bytes', 'requestBytes', 'n'],
  ['response_bytes', 'responseBytes', 'n'],
  ['output_hash', 'outputHash', 'sn'],
  ['output', 'output', 'on'],
  ['output_truncated', 'outputTruncated', 'b'],
  ['request_id', 'requestId', 'ri'],
  ['mcp_session_id', 'mcpSessionId', 'sn'],
  ['mcp_method', 'mcpMethod', 'sn'],
  ['mcp_tool', 'mcpTool', 'sn'],
  ['shadow_rule', 'shadowRule', 'sn'],
  ['shadow_decision', 'shadowDecision', 'sn'],
  ['approval_id', 'approvalId', 'un'],
];

/** RFC 8785 §3.2.3: keys sorted by their UTF-16 code units (all ASCII here). */
export const SORTED = [...HASHED].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** ES2024's String.prototype.isWellFormed / toWellFormed (Node 20 and later; not yet in this TypeScript lib). */
type WellFormedString = string & { isWellFormed(): boolean; toWellFormed(): string };

/**
 * A string as UTF-8 storage keeps it: a lone surrogate becomes U+FFFD. The
 * native check, not a /u regular expression: it runs on every text field of
 * every entry (measured on a 180-character string: ~120 ns against ~600 ns).
 */
export function wellFormed(value: string): string {
  return (value as WellFormedString).isWellFormed() ? value : (value as WellFormedString).toWellFormed();
}

/** A string as it reads back from storage, in its RFC 8785 form (JSON.stringify's escaping). */
function str(value: string): string {
  return JSON.stringify(wellFormed(value));
}

function strOrNull(value: string | null): string {
  return value === null || value === '' ? 'null' : str(value);
}

function int(value: number): string {
  if (!Number.isSafeInteger(value)) throw new RangeError(`audit entry field must be a safe integer, got ${value}`);
  return String(value);
}

function time(value: string): string {
  return `"${ISO_MS.test(value) ? value : new Date(value).toISOString()}"`;
}

/**
 * The expression for one value of record `r`. Text fields (`s`, `sn`) and the
 * timestamp keep their last value and its JSON (compiled-memo.ts): entryHash
 * over 250 calls of one agent, each its own ids, ~14 a millisecond: ~2.5 → ~1.9
 * µs, old and new side by side in one process; with the runs below, ~1.5 µs.
 */
function valueOf(kind: Kind, field: string, i: number): string {
  const memo = (encode: string) => memoized(`r.${field}`, encode, i);
  switch (kind) {
    case 's': return memo('str');
    case 'ri': return `(r.${field} === r.id ? '"' + r.id + '"' : ${memo('str')})`;
    case 'u': return `'"' + r.${field} + '"'`;
    case 'un': return `(r.${field} === null || r.${field} === '' ? 'null' : '"' + r.${field} + '"')`;
    case 'sn': return memo('strOrNull');
    case 'on': return `(r.${field} === null ? 'null' : str(r.${field}))`;
    case 'n': return `int(r.${field})`;
    case 'b': return `(r.${field} ? 'true' : 'false')`;
    case 't': return memo('time');
  }
}

/**
 * Keys whose values change from call to call (ids, instants, sizes, outputs).
 * The keys between them repeat together under load (an agent's calls to one
 * tool) and are memoized as runs (compiled-memo.ts): the canonical JSON of a
 * small GET is ~24 pieces instead of ~55, which V8 flattens for the hash.
 */
const VARYING: ReadonlySet<string> = new Set(['id', 'timestamp', 'latency_ms', 'request_id', 'request_bytes', 'response_bytes', 'output', 'output_hash']);

/**
 * The entry's RFC 8785 canonical JSON without entry_hash, compiled from the key
 * list into one template (keys and field names come from the table above, never
 * from input), as encodeAuditRow is.
 */
export const canonicalEntry = compileTemplate<(record: AuditRecord) => string>(
  { str, strOrNull, int, time },
  SORTED.map(([key, field, kind], i) => ({ value: `r.${field}`, pieces: [`'${i > 0 ? ',' : ''}"${key}":'`, valueOf(kind, field, i)], varies: VARYING.has(key) })),
  SORTED.length,
  '',
  (body) => `function canonicalEntry(r) { return '{' + ${body} + '}'; }`,
);

/** Lowercase hex SHA-256 of canonicalEntry. */
export function entryHash(record: AuditRecord): string {
  return hash('sha256', canonicalEntry(record), 'hex');
}

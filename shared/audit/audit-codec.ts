// The audit table's one definition: its columns (name, ClickHouse type, the
// record field each carries), the DDL and migrations made from them, a record's
// wire form (one TabSeparated line) and its way back from a JSONEachRow row, and
// the spool's file format for a batch of such lines. The store only does I/O
// with these; the batcher and the spool only move the lines.
import { compress, decompress } from '@mongodb-js/zstd';
import { LIMIT_RULE_PREFIX, TARGET_FORBIDDEN_RULE, UNINSPECTABLE_RULE } from '../policy/types.js';
import type { AuditRecord } from '../types.js';
import { entryHash, SORTED as HASHED_KEYS, type Kind as HashedKind } from './entry-json.js';
import { countSealLines } from './seal.js';
import { chFromIso, isoFromCh } from './ch-instant.js';
import { compileTemplate, memoized } from './compiled-memo.js';

export const AUDIT_TABLE = 'audit_log';

/**
 * How a column carries its record field: `text` a string; `instant` the ISO 8601
 * timestamp as DateTime64(3, 'UTC'); `count` a non-negative integer (checked: it
 * goes in unquoted); `empty-is-null` a string whose null is stored as '';
 * `text-or-null` a string whose null is stored as '' and told apart by the
 * field's `presence` column (1 when not null); `flag` a boolean as 0/1;
 * `entry-hash` the record's entry_hash, computed as the row is encoded
 * (entry-json.ts), read back as null for rows written before it existed;
 * `batch` the id of the batch the row was queued in (the encoder's second
 * argument), which its seal names (seal.ts), '' when none.
 */
type ColumnKind = 'text' | 'instant' | 'count' | 'empty-is-null' | 'text-or-null' | 'presence' | 'flag' | 'entry-hash' | 'batch';

interface AuditColumn {
  readonly name: string;
  readonly type: string;
  readonly field: keyof AuditRecord;
  readonly kind: ColumnKind;
}

/**
 * The table, as analysts see it, in insert and select order. output_has tells
 * "no output stored" (null) from an empty body ('').
 */
export const AUDIT_COLUMNS = [
  { name: 'id', type: 'UUID', field: 'id', kind: 'text' },
  { name: 'timestamp', type: "DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1))", field: 'timestamp', kind: 'instant' },
  { name: 'org_id', type: 'UUID', field: 'orgId', kind: 'text' },
  { name: 'agent_id', type: 'UUID', field: 'agentId', kind: 'text' },
  { name: 'agent_name', type: 'LowCardinality(String)', field: 'agentName', kind: 'text' },
  { name: 'tool_name', type: 'LowCardinality(String)', field: 'toolName', kind: 'text' },
  { name: 'action', type: 'LowCardinality(String)', field: 'action', kind: 'text' },
  { name: 'tool_url', type: 'String CODEC(ZSTD(3))', field: 'toolUrl', kind: 'text' },
  { name: 'decision', type: "Enum8('allowed' = 1, 'denied' = 2)", field: 'decision', kind: 'text' },
  { name: 'reasoning', type: 'String CODEC(ZSTD(3))', field: 'reasoning', kind: 'text' },
  { name: 'task_id', type: 'String CODEC(ZSTD(1))', field: 'taskId', kind: 'text' },
  { name: 'latency_ms', type: 'UInt32 CODEC(T64, ZSTD(1))', field: 'latencyMs', kind: 'count' },
  { name: 'status_code', type: 'UInt16', field: 'statusCode', kind: 'count' },
  { name: 'rule_matched', type: 'LowCardinality(String)', field: 'ruleMatched', kind: 'text' },
  { name: 'source', type: "Enum8('proxy' = 1, 'api' = 2)", field: 'source', kind: 'text' },
  { name: 'request_bytes', type: 'UInt64 CODEC(T64, ZSTD(1))', field: 'requestBytes', kind: 'count' },
  { name: 'response_bytes', type: 'UInt64 CODEC(T64, ZSTD(1))', field: 'responseBytes', kind: 'count' },
  { name: 'output_hash', type: 'String', field: 'outputHash', kind: 'empty-is-null' },
  { name: 'output', type: 'String CODEC(ZSTD(3))', field: 'output', kind: 'text-or-null' },
  { name: 'output_has', type: 'Bool', field: 'output', kind: 'presence' },
  { name: 'output_truncated', type: 'Bool', field: 'outputTruncated', kind: 'flag' },
  { name: 'request_id', type: 'String', field: 'requestId', kind: 'text' },
  // Added later: a table made before gets it from auditTableMigrations (ADD COLUMN).
  { name: 'mcp_session_id', type: 'String', field: 'mcpSessionId', kind: 'empty-is-null' },
  { name: 'mcp_method', type: 'LowCardinality(String)', field: 'mcpMethod', kind: 'empty-is-null' },
  { name: 'mcp_tool', type: 'LowCardinality(String)', field: 'mcpTool', kind: 'empty-is-null' },
  { name: 'shadow_rule', type: 'LowCardinality(String)', field: 'shadowRule', kind: 'empty-is-null' },
  { name: 'shadow_decision', type: 'LowCardinality(String)', field: 'shadowDecision', kind: 'empty-is-null' },
  // What policy replay needs: the path as the policy matched it, and whether the
  // policy decided the call. Rows written before these columns read '' and, from
  // the rule name, whether another stage refused them (SSRF guard, a limit) or no
  // policy ran (a bad target): see docs/api.md "POST /policy/replay".
  { name: 'policy_path', type: 'String CODEC(ZSTD(1))', field: 'policyPath', kind: 'text' },
  // Old rows: allowed under a rule, or refused 403 by one (other refusals after the policy allowed a call, 5xx or 400, kept its rule name).
  { name: 'policy_decided', type: `Bool DEFAULT source = 'proxy' AND rule_matched NOT IN ('', '${TARGET_FORBIDDEN_RULE}', '${UNINSPECTABLE_RULE}') AND NOT startsWith(rule_matched, '${LIMIT_RULE_PREFIX}') AND (decision = 'allowed' OR status_code = 403)`, field: 'policyDecided', kind: 'flag' },
  // Held calls (CONTRACT.md "Held calls"). New columns go last: a spooled line of an
  // earlier version has fewer fields, and the missing trailing ones take their defaults.
  { name: 'approval_id', type: 'String', field: 'approvalId', kind: 'empty-is-null' },
  // CONTRACT.md "Tamper-evident audit": SHA-256 of the entry's canonical JSON, written with the row and never changed.
  { name: 'entry_hash', type: 'String', field: 'entryHash', kind: 'entry-hash' },
  // The batch whose seal covers the row. Last, and entry_hash just before it: the
  // sealer reads both from the end of the line (seal.ts, SealColumns.pushFresh and pushLine).
  { name: 'batch_id', type: 'String', field: 'batchId', kind: 'batch' },
] as const satisfies readonly AuditColumn[];

export type AuditColumnName = (typeof AUDIT_COLUMNS)[number]['name'];

/** The column names in AUDIT_COLUMNS order: the INSERT's column list. */
export const AUDIT_COLUMN_NAMES = AUDIT_COLUMNS.map((c) => c.name) as readonly AuditColumnName[] as readonly [AuditColumnName, ...AuditColumnName[]];

/** The columns as a SELECT list, in AUDIT_COLUMNS order. */
export const AUDIT_SELECT_LIST = AUDIT_COLUMN_NAMES.join(', ');

/** One row as JSONEachRow returns it. 64-bit integers are numbers over chDB and
 *  may be strings over HTTP; Bool may be true/false or 1/0. */
export type AuditRow = Readonly<Record<AuditColumnName, string | number | boolean>>;

// ---- DDL and migrations ----------------------------------------------------

/**
 * MergeTree settings the table must carry; the migration restores any that
 * differ. The dedup window keeps the last 10,000 insert tokens, so a batch the
 * spool replays after a lost acknowledgement lands once. The fsync settings make
 * an acknowledged insert survive a power cut (the store promises "resolves once
 * durable"); measured on chDB, ext4: +6–8 ms per insert, paid once per batch.
 */
const TABLE_SETTINGS: Readonly<Record<string, number>> = {
  non_replicated_deduplication_window: 10_000,
  fsync_after_insert: 1,
  fsync_part_directory: 1,
};

/**
 * Ordered by (org_id, timestamp, id) because every read is "one org, newest
 * first" (read in reverse key order); partitioned by month so the TTL drops
 * whole parts.
 */
export function auditTableDdl(retentionDays: number): string {
  const width = Math.max(...AUDIT_COLUMN_NAMES.map((n) => n.length)) + 2;
  return `CREATE TABLE IF NOT EXISTS ${AUDIT_TABLE}
(
${[...AUDIT_COLUMNS, ...AUDIT_SERVER_COLUMNS].map((c) => `    ${c.name.padEnd(width)}${c.type}`).join(',\n')},
${AUDIT_SERVER_INDEXES.map((i) => `    INDEX ${i.name} ${i.definition}`).join(',\n')}
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(timestamp)
ORDER BY (org_id, timestamp, id)
TTL ${ttlExpression(retentionDays)}
SETTINGS ${settingsList(Object.entries(TABLE_SETTINGS))}`;
}

/**
 * The statements that bring an existing table to the configured shape, given its
 * `engine_full` from system.tables (empty when unknown); none when it has it.
 * Each is idempotent, so any number of processes may run them at once.
 */
export function auditTableMigrations(engineFull: string, retentionDays: number, columns: readonly string[] = AUDIT_COLUMN_NAMES): string[] {
  const statements: string[] = [];
  // Columns the table does not have yet (a table made by an earlier version), in table order.
  for (const column of AUDIT_COLUMNS) {
    if (!columns.includes(column.name)) statements.push(`ALTER TABLE ${AUDIT_TABLE} ADD COLUMN IF NOT EXISTS ${column.name} ${column.type}`);
  }
  // The server prints the TTL as `toDateTime(timestamp) + toIntervalDay(N)`.
  const current = /TTL\s+toDateTime\(timestamp\)\s*\+\s*toIntervalDay\((\d+)\)/.exec(engineFull);
  if (current?.[1] !== String(retentionDays)) {
    // Rewrites the TTL of existing parts in a background mutation.
    statements.push(`ALTER TABLE ${AUDIT_TABLE} MODIFY TTL ${ttlExpression(retentionDays)}`);
  }
  const settings = engineFull.slice(engineFull.lastIndexOf(' SETTINGS ') + 1);
  const drifted = Object.entries(TABLE_SETTINGS).filter(([k, v]) => !new RegExp(`\\b${k} = ${v}\\b`).test(settings));
  if (drifted.length > 0) statements.push(`ALTER TABLE ${AUDIT_TABLE} MODIFY SETTING ${settingsList(drifted)}`);
  return statements;
}

/**
 * Columns the server fills with their DEFAULT at insert time: never in the
 * INSERT's column list, never part of an entry (so not of its entry_hash).
 * `written_at` is when the row was inserted, by the store's clock: the live
 * audit stream (admin/audit-stream.ts) follows it, because `timestamp` is the
 * call's time and a long call or a spooled batch is written long after it.
 */
export const AUDIT_SERVER_COLUMNS = [
  { name: 'written_at', type: "DateTime64(3, 'UTC') DEFAULT now64(3)" },
] as const;

/** A minmax skip index on written_at: the stream reads the last seconds' rows of an org without scanning the others. */
export const AUDIT_SERVER_INDEXES = [
  { name: 'written_at_minmax', definition: 'written_at TYPE minmax GRANULARITY 1' },
] as const;

/**
 * Adds the server-filled columns and their index to a table made before them.
 * A column added with a DEFAULT is computed at read time in the parts that lack
 * it, so now64(3) would make every old row look just written on every read:
 * MATERIALIZE COLUMN stores it once (the migration's time) in the old parts.
 */
export function auditServerColumnMigrations(columns: readonly string[]): string[] {
  const statements: string[] = [];
  for (const column of AUDIT_SERVER_COLUMNS) {
    if (columns.includes(column.name)) continue;
    statements.push(`ALTER TABLE ${AUDIT_TABLE} ADD COLUMN IF NOT EXISTS ${column.name} ${column.type}`);
    // Not waited for: on a large table it runs long (a start must not wait on it,
    // nor an HTTP request time out on it); until it reaches a part, that part's
    // rows read written_at as now, which the stream's timestamp bound keeps out.
    statements.push(`ALTER TABLE ${AUDIT_TABLE} MATERIALIZE COLUMN ${column.name}`);
    for (const index of AUDIT_SERVER_INDEXES) statements.push(`ALTER TABLE ${AUDIT_TABLE} ADD INDEX IF NOT EXISTS ${index.name} ${index.definition}`);
  }
  return statements;
}

function ttlExpression(retentionDays: number): string {
  return `toDateTime(timestamp) + INTERVAL ${retentionDaysLiteral(retentionDays)} DAY`;
}

function settingsList(settings: readonly (readonly [string, number])[]): string {
  return settings.map(([k, v]) => `${k} = ${v}`).join(', ');
}

/** Interpolated into DDL (ClickHouse takes no parameters there), so checked strictly. */
export function retentionDaysLiteral(days: number): number {
  if (!Number.isSafeInteger(days) || days < 1 || days > 36_500) throw new RangeError('retentionDays must be a whole number from 1 to 36500');
  return days;
}

// ---- Encoding: one TabSeparated line per record -----------------------------

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const TSV_SPECIAL = /[\\\t\n\r\0]/;
const TSV_ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r', '\0': '\\0' };

/** A string as a TabSeparated field (ClickHouse's escaping: backslash, tab, LF, CR, NUL). */
function tsv(value: string): string {
  return TSV_SPECIAL.test(value) ? value.replace(/[\\\t\n\r\0]/g, (c) => TSV_ESCAPES[c]!) : value;
}

function uint(n: number): number {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`audit record field must be a non-negative integer, got ${n}`);
  return n;
}

/** An ISO 8601 instant as DateTime64(3)'s text form in UTC. Records carry
 *  toISOString() output; anything else is parsed and normalised. */
function instant(iso: string): string {
  const ts = ISO_MS.test(iso) ? iso : parseInstant(iso, 'timestamp').toISOString();
  return chFromIso(ts);
}

/**
 * The expression that encodes column `i` of record `r`. Text columns and the
 * instant keep their last value and its encoding (compiled-memo.ts): side by
 * side over 250 calls of one agent, each its own ids, the row less its entry
 * hash: ~1.2 → ~0.75 µs. With the runs (compileTemplate), the row with its entry
 * hash: ~2.6 → ~1.95 µs, of which ~0.4 is the entry hash's own runs.
 */
function fieldExpression({ field, kind }: AuditColumn, i: number): string {
  switch (kind) {
    case 'text': return memoized(`r.${field}`, 'tsv', i);
    case 'instant': return memoized(`r.${field}`, 'instant', i);
    case 'count': return `uint(r.${field})`;
    case 'empty-is-null': return memoized(`(r.${field} ?? '')`, 'tsv', i);
    case 'text-or-null': return `tsv(r.${field} ?? '')`;
    case 'presence': return `(r.${field} !== null ? 1 : 0)`;
    case 'flag': return `(r.${field} ? 1 : 0)`;
    case 'entry-hash': return 'entryHash(r)';
    case 'batch': return 'b';
  }
}

/**
 * Columns whose values change from call to call (ids, instants, sizes, the
 * output, the entry hash, the batch). The columns between them repeat together
 * under load and are memoized as runs (compiled-memo.ts): the line is ~20
 * pieces instead of ~60, which V8 walks again for the journal's and the batch's
 * joins.
 */
const VARYING_KINDS: ReadonlySet<ColumnKind> = new Set(['instant', 'text-or-null', 'presence', 'entry-hash', 'batch']);
const VARYING_COLUMNS: ReadonlySet<string> = new Set(['id', 'latency_ms', 'request_id', 'request_bytes', 'response_bytes', 'output_hash']);

/**
 * One record as a TabSeparated line in AUDIT_COLUMNS order, with its newline;
 * `batchId` is the batch it is queued in (a UUID), '' for a row no seal covers.
 * Compiled from the column table into one template of named property reads, as
 * a hand-written encoder would be: a loop calling one encoder per column costs
 * ~30% more per record (measured, Node 20, bench's small-GET record: 560 ns
 * hand-written, 525 ns compiled, 735 ns loop). Field names come from the typed
 * table above, never from input.
 */
export const encodeAuditRow = compileTemplate<(record: AuditRecord, batchId?: string) => string>(
  { tsv, instant, uint, entryHash },
  AUDIT_COLUMNS.map((c, i) => ({ value: `r.${c.field}`, pieces: [fieldExpression(c, i)], varies: VARYING_KINDS.has(c.kind) || VARYING_COLUMNS.has(c.name) })),
  AUDIT_COLUMNS.length,
  '\t',
  (body) => `function encodeAuditRow(r, b = '') { return ${body} + '\\n'; }`,
);

/** Records as concatenated lines, ready for one insert. */
export function encodeAuditRows(rows: readonly AuditRecord[]): string {
  let out = '';
  for (const r of rows) out += encodeAuditRow(r);
  return out;
}

/** How many records a body of concatenated lines holds (its seal lines are not records). */
export function countEncodedRows(body: string): number {
  let n = 0;
  for (let i = body.indexOf('\n'); i !== -1; i = body.indexOf('\n', i + 1)) n++;
  return n - countSealLines(body);
}

// ---- The entry hash, recomputed by ClickHouse -------------------------------

/** A hashed field's canonical JSON form as a ClickHouse expression over its column. */
function canonicalSql(kind: HashedKind, column: string): string {
  switch (kind) {
    case 's':
    case 'ri': return `toJSONString(${column})`;
    case 'u': return `concat('"', toString(${column}), '"')`;
    case 'un': return `if(${column} = '', 'null', concat('"', ${column}, '"'))`;
    case 'sn': return `if(${column} = '', 'null', toJSONString(${column}))`;
    case 'on': return `if(output_has, toJSONString(${column}), 'null')`;
    case 'n': return `toString(${column})`;
    case 'b': return `if(${column}, 'true', 'false')`;
    case 't': return `concat('"', replaceOne(toString(${column}), ' ', 'T'), 'Z"')`;
  }
}

/**
 * 1 when the row's fields hash to its entry_hash, computed by ClickHouse from
 * the same key table as canonicalEntry (entry-json.ts), in parallel and without
 * moving the rows: verification reads a million entries in seconds this way.
 * Run with output_format_json_escape_forward_slashes = 0. ClickHouse's JSON
 * differs from RFC 8785 in two rare spellings (U+2028/U+2029 escaped; control
 * characters in upper-case hex), so a 0 here is only a candidate: the verifier
 * recomputes those rows' hashes itself before it calls one edited.
 */
export const ENTRY_HASH_OK_SQL = (() => {
  const columnOf = new Map<string, string>((AUDIT_COLUMNS as readonly AuditColumn[]).filter((c) => c.kind !== 'presence').map((c) => [c.field, c.name]));
  const parts = HASHED_KEYS.map(([key, field, kind], i) => `'${i > 0 ? ',' : '{'}"${key}":', ${canonicalSql(kind, columnOf.get(field)!)}`);
  return `lower(hex(SHA256(concat(${parts.join(', ')}, '}')))) = entry_hash`;
})();

// ---- Decoding: a JSONEachRow row back to a record ---------------------------

export function decodeAuditRow(row: AuditRow): AuditRecord {
  return decodeColumns(row) as unknown as AuditRecord;
}

/** The columns the PDF report prints: its queries select only these (an `output` can be 64 KiB or more). */
export const REPORT_COLUMNS = ['timestamp', 'agent_id', 'agent_name', 'tool_name', 'action', 'decision', 'status_code', 'latency_ms', 'rule_matched', 'reasoning'] as const satisfies readonly AuditColumnName[];
/** The most characters of a text the PDF keeps (no A4 column holds more): a `reasoning` of up to 64 KiB is cut by the store, not read whole and parsed on the event loop. */
export const REPORT_TEXT_CHARS = 2000;
export const REPORT_SELECT_LIST = REPORT_COLUMNS.map((c) => (c === 'reasoning' ? `leftUTF8(reasoning, ${REPORT_TEXT_CHARS}) AS reasoning` : c)).join(', ');

/** A report row: the fields of REPORT_COLUMNS. */
export type ReportEntry = Pick<AuditRecord, 'timestamp' | 'agentId' | 'agentName' | 'toolName' | 'action' | 'decision' | 'statusCode' | 'latencyMs' | 'ruleMatched' | 'reasoning'>;

export function decodeReportRow(row: Partial<AuditRow>): ReportEntry {
  return decodeColumns(row) as unknown as ReportEntry;
}

/** The fields of the columns present in `row`. */
function decodeColumns(row: Partial<AuditRow>): Record<string, unknown> {
  const record: Record<string, unknown> = {};
  // AUDIT_COLUMNS puts each presence column after the field it marks, so it has the last word.
  for (const { name, field, kind } of AUDIT_COLUMNS as readonly AuditColumn[]) {
    if (!(name in row)) continue;
    const value = row[name as AuditColumnName]!;
    switch (kind) {
      case 'text':
      case 'text-or-null': record[field] = value; break;
      case 'instant': record[field] = isoFromCh(String(value)); break;
      case 'count': record[field] = Number(value); break;
      case 'empty-is-null':
      case 'entry-hash':
      case 'batch': record[field] = value === '' ? null : value; break;
      case 'presence': if (!truthy(value)) record[field] = null; break;
      case 'flag': record[field] = truthy(value); break;
    }
  }
  return record;
}

/** `2026-03-01T12:00:00.123Z` → `2026-03-01 12:00:00.123`, the DateTime64(3) text form in UTC. */
export function toChDateTime(d: Date): string {
  return chFromIso(d.toISOString());
}


export function parseInstant(value: string, field: string): Date {
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) throw new RangeError(`${field} is not an ISO 8601 instant: ${JSON.stringify(value)}`);
  return d;
}

/** A number a query returned (64-bit integers may come quoted over HTTP); NaN (an empty quantile) is 0. */
export function finiteOrZero(v: number | string | undefined): number {
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}

function truthy(v: unknown): boolean {
  return v === true || v === 1 || v === '1' || v === 'true';
}

// ---- Spool files: one batch of lines per file -------------------------------

/**
 * A spooled batch is its lines, concatenated, zstd-compressed (level 3), in a file
 * named `<16-digit sequence>-<dedup token>.rows.zst`: sorting the names gives the
 * order the batches were spooled in, and the token a replay must reuse.
 */
const SPOOL_FILE_RE = /^(\d{16})-([0-9a-f-]{36})\.rows\.zst$/;
const SPOOL_ZSTD_LEVEL = 3;

export function spoolFileName(seq: number, token: string): string {
  return `${String(seq).padStart(16, '0')}-${token}.rows.zst`;
}

/** The sequence number and token of a spool file's name; null for any other file. */
export function parseSpoolFileName(name: string): { seq: number; token: string } | null {
  const m = SPOOL_FILE_RE.exec(name);
  return m === null ? null : { seq: Number(m[1]), token: m[2]! };
}

/** A batch's lines (strings, or UTF-8 bytes of whole lines: row-bytes.ts) as a spool file's payload. */
export function encodeSpoolFile(lines: readonly (string | Uint8Array)[]): Promise<Buffer> {
  return compress(Buffer.concat(lines.map((line) => (typeof line === 'string' ? Buffer.from(line, 'utf8') : line))), SPOOL_ZSTD_LEVEL);
}

/** A spool file's lines, concatenated, ready for insertEncoded. Throws on a corrupt file. */
export async function decodeSpoolFile(payload: Buffer): Promise<string> {
  return (await decompress(payload)).toString('utf8');
}

// The audit store: one ClickHouse table, reached over HTTP (CLICKHOUSE_URL) or
// through the embedded chDB engine. Both run test/integration/audit-store.test.ts.
import type { ReportEntry } from '../audit/audit-codec.js';
import type { Seal } from '../audit/seal.js';
import type { AuditFilter, AuditRecord } from '../types.js';

/**
 * A batch's body already apart: its rows, and its seals as rows of the seals
 * table (no seal-line prefix). The batcher hands its rows as UTF-8 bytes in
 * parts (row-bytes.ts), which the store must not keep past its answer.
 */
export interface BatchParts {
  rows: string | readonly Uint8Array[];
  seals: string;
}

export interface AuditPage {
  rows: AuditRecord[];
  total: number;
}

export interface AuditReportData {
  totals: { calls: number; allowed: number; denied: number; p50LatencyMs: number; p95LatencyMs: number };
  /** One entry per UTC day in the window that has calls, oldest first; day is YYYY-MM-DD. */
  perDay: { day: string; allowed: number; denied: number }[];
  perAgent: { agentId: string; agentName: string; calls: number; allowed: number; denied: number; p50LatencyMs: number }[];
  /** Per tool, and per MCP tool within it where the proxy read one (mcpTool null otherwise). */
  topTools: { toolName: string; mcpTool?: string | null; calls: number; denied: number }[];
  recentDenied: ReportEntry[];
  /** Newest first, at most the cap asked for; only the printed columns. */
  entries: ReportEntry[];
}

/** GET /audit/summary: a window's calls and denials in all, and per agent (most calls first, at most the cap asked for). */
export interface AuditSummary {
  calls: number;
  denied: number;
  /** Agents with calls in the window, all of them (`agents` may hold fewer). */
  agentsTotal: number;
  agents: { agentId: string; agentName: string; calls: number; denied: number; p95LatencyMs: number }[];
}

/**
 * One group of an agent's proxied calls in a window with the same decision
 * inputs (policy replay): tool, action, path, and the outcome recorded.
 */
export interface ReplayGroup {
  toolName: string;
  action: string;
  /** The normalised policy path; for rows written before it was recorded, the raw path of tool_url (`normalised` false). */
  path: string;
  normalised: boolean;
  /** The JSON-RPC request the proxy inspected ('' when none). */
  mcpMethod: string;
  mcpTool: string;
  decision: 'allowed' | 'denied';
  /** The policy gave the decision (else it is kept as it is). */
  policyDecided: boolean;
  calls: number;
  /** Its newest call's timestamp, as the store writes it (one format, so strings order as times). */
  newest: string;
  /** A hash of toolName, action, path, mcpMethod, mcpTool and decision, as the store computes it: what replaySamples is asked for. */
  key: string;
}

/** The changed groups a sample query names, at most (their keys travel as query parameters). Beyond it, those whose newest call is newest: they hold the newest changed calls. */
export const REPLAY_SAMPLE_GROUPS = 2_000;

/** A changed call: its entry, and its group's key (ReplayGroup.key), not the group's names and path (a name recorded before its bound may be a megabyte). */
export interface ReplaySample {
  id: string;
  timestamp: string;
  toolName: string;
  action: string;
  decision: 'allowed' | 'denied';
  key: string;
}

/** One chain of seals as the store sums it up. */
export interface SealChain {
  writer: string;
  firstSeq: number;
  lastSeq: number;
  count: number;
  /** Distinct seqs: fewer than count when one is repeated. */
  distinctSeqs: number;
  lastHash: string;
  /** ISO 8601. */
  firstCreatedAt: string;
  /** With a window: the last seq of a seal wholly before it, and the first of one wholly after it (0: none). */
  beforeSeq: number;
  afterSeq: number;
  /** With a window: the first and last seq of the chain's seals meeting it; null when none does. */
  meeting: { firstSeq: number; lastSeq: number } | null;
}

/** The instants a verification reads with. */
export interface VerifyScan {
  /** Entries read: [from, to). */
  from: Date;
  to: Date;
  /** The window verified: [since, until) (inside [from, to)). */
  since: Date;
  until: Date;
  /** Entries without an entry_hash are legacy in [legacyFrom, legacyBefore) only: dated earlier than the org, or after sealing began, they are not. */
  legacyFrom: Date;
  legacyBefore: Date;
  /** Entries inserted (written_at) in [graceFrom, graceUntil) may not be sealed yet. */
  graceFrom: Date;
  /**
   * Past the verifier's clock (with a margin): an entry "inserted" after it has
   * a written_at set by hand (the column is not hashed), and is read as old, so
   * a forged entry cannot stay pending for ever.
   */
  graceUntil: Date;
}

/** An entry named by id and ISO timestamp. */
export interface EntryRef {
  id: string;
  timestamp: string;
}

/** One batch's entries (in one page), as verification needs them. */
export interface VerifyGroup {
  /** null for entries written without one. */
  batchId: string | null;
  count: number;
  inWindow: number;
  first: EntryRef;
  last: EntryRef;
  /** RFC 6962 leaf hashes (base64 SHA-256 of 0x00 and the entry hash: base64 is a third cheaper for the server to write than hex) of the hashed entries, in (timestamp, id) order. */
  leaves: string[];
  /** Entries in the window from before the org's first seal without an entry_hash or a batch (written before entries were hashed, or sealed). */
  legacyInWindow: number;
  /** The earliest entry in the window without an entry_hash outside [legacyFrom, legacyBefore). */
  lateUnhashed: EntryRef | null;
  /** Hashed entries whose fields the store hashed differently than entry_hash (candidates, rechecked). */
  mismatched: string[];
  /** Hashed entries in the window written in [graceFrom, graceUntil). */
  recentInWindow: number;
  /** The earliest hashed entry in the window written before graceFrom or from graceUntil on (not legacy). */
  oldInWindow: EntryRef | null;
}

/** A row's id, when the store inserted it (written_at, ms since the epoch by the store's clock) and its date (timestamp, ms). */
export interface WrittenId {
  id: string;
  orgId: string;
  writtenMs: number;
  dateMs: number;
}

/** The rows of one org that the store inserted at one millisecond (written_at). */
export interface WrittenCount {
  orgId: string;
  writtenMs: number;
  rows: number;
}

export interface AuditStore {
  /**
   * Writes rows in one insert. `dedupToken` makes a retried insert of the same
   * batch a no-op (ClickHouse insert_deduplication_token). Resolves once durable.
   */
  insert(rows: readonly AuditRecord[], dedupToken?: string): Promise<void>;
  /**
   * One record as the store's wire form (a line, with its newline). The batcher
   * and the spool hold records in this form, the batcher as the line's UTF-8
   * bytes (row-bytes.ts): far lighter between a call's end and its batch's
   * insert than an object graph, and off the V8 heap.
   */
  encode(record: AuditRecord, batchId?: string): string;
  /**
   * Writes lines made by `encode`, concatenated, as one insert (dedupToken as for
   * insert); seal lines after them (seal.ts) go to the seals table with the same token.
   * The batcher hands its rows and its seals' rows apart (BatchParts), so a
   * batch of megabytes is not joined only to be split again.
   */
  insertEncoded(body: string | BatchParts, dedupToken: string): Promise<void>;
  /** Newest first, with the total number of rows matching the filter. */
  list(orgId: string, filter: AuditFilter, limit: number, offset: number): Promise<AuditPage>;
  /**
   * The same page handed to `onRows` in slices of a bounded size, newest first
   * (a page of large entries is hundreds of MB: parsed whole, it held the event
   * loop over a second); resolves with the total.
   */
  listInSlices(orgId: string, filter: AuditFilter, limit: number, offset: number, onRows: (rows: AuditRecord[]) => void): Promise<number>;
  report(orgId: string, since: Date, until: Date, maxEntries: number, topN: number): Promise<AuditReportData>;
  /** Calls and denials of [since, until), in all and per agent with its p95 latency (quantileExact, as the report's), computed by the store. */
  summary(orgId: string, since: Date, until: Date, maxAgents: number): Promise<AuditSummary>;
  /**
   * The agent's proxied calls in [since, until), grouped by decision inputs (one
   * row per distinct input and outcome), handed to `onGroups` in parts of a
   * bounded size: paths with ids make about a group a call, millions in a week.
   * A part's handling that returns a promise is awaited before the next part is read.
   */
  replayGroups(orgId: string, agentId: string, since: Date, until: Date, onGroups: (groups: ReplayGroup[]) => void | Promise<void>): Promise<void>;
  /** Whether this seal is stored (read by the table's key): its batch's rows and seals both landed (rows go first). */
  sealStored(orgId: string, writer: string, seq: number, sealHash: string): Promise<boolean>;
  /** The newest `limit` policy-decided calls in [since, until) of the groups with these keys (ReplayGroup.key; at most REPLAY_SAMPLE_GROUPS are read). */
  replaySamples(orgId: string, agentId: string, since: Date, until: Date, keys: readonly string[], limit: number): Promise<ReplaySample[]>;
  /**
   * The org's seals whose time range meets [since, until) (every seal when no
   * window), by first_at, then writer and seq; at most `limit`.
   */
  listSeals(orgId: string, window?: { since: Date; until: Date }, limit?: number, newestFirst?: boolean): Promise<Seal[]>;
  /** How many of the org's seals meet [since, until). */
  countSeals(orgId: string, window: { since: Date; until: Date }): Promise<number>;
  /** Each chain (writer) of the org, summed up by the store: first and last seq, how many seals, the last seal's hash, the earliest created_at. */
  sealChains(orgId: string, window?: { since: Date; until: Date }): Promise<SealChain[]>;
  /** The first seq of the chain after `afterSeq` whose predecessor is missing, or null (a gap: a seal removed). */
  firstSealGap(orgId: string, writer: string, afterSeq: number): Promise<number | null>;
  /**
   * One chain's seals with seq in [fromSeq, toSeq] (past 2^53: to its end), by seq
   * then id; with `limit`, the first `limit` and every other one of the last one's seq.
   */
  sealRange(orgId: string, writer: string, fromSeq: number, toSeq: number, limit?: number): Promise<Seal[]>;
  /** The org's seals of these batches. */
  sealsOfBatches(orgId: string, batchIds: readonly string[]): Promise<Seal[]>;
  /**
   * What verification needs of the org's entries in [scan.from, scan.to),
   * summed up per batch by the store (hashes recomputed, leaves sorted), in
   * pages of about `pageRows` entries: time slices of whole minutes, oldest
   * first, so a batch split across pages continues where it stopped.
   */
  verifyGroups(orgId: string, scan: VerifyScan, onPage: (groups: VerifyGroup[]) => void, pageRows?: number): Promise<void>;
  /** The org's entries with these ids, every field (verification rechecks a candidate mismatch with them). */
  entriesByIds(orgId: string, ids: readonly string[]): Promise<AuditRecord[]>;
  /** Every org with entries or seals (the offline verifier checks each). */
  orgIds(): Promise<string[]>;
  /** The store's clock (ms since the epoch): the live audit stream keeps its cursor on it, not on this process's. */
  clockMs(): Promise<number>;
  /**
   * The rows of these orgs inserted at or after `sinceMs` (store clock), oldest
   * written first: ids and dates only (live audit stream). All three `written` reads take
   * only rows dated at most a day before `floorMs` (default `sinceMs`; the others'
   * floor is their `sinceMs`): a poll passes one floor to the three.
   */
  writtenSince(orgIds: readonly string[], sinceMs: number, floorMs?: number): Promise<WrittenId[]>;
  /** How many rows of each of these orgs were inserted at each millisecond at or after `sinceMs` (an insert's rows share one), oldest first. */
  writtenCounts(orgIds: readonly string[], sinceMs: number): Promise<WrittenCount[]>;
  /** The rows of these ids among the orgs' rows written at or after `sinceMs`, as `list` returns them, oldest written first. */
  writtenEntries(orgIds: readonly string[], ids: readonly string[], sinceMs: number): Promise<AuditRecord[]>;
  /** Total rows for the org (tests and the bench's audit check). */
  count(orgId?: string): Promise<number>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

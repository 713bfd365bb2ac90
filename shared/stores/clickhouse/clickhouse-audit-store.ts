// The audit store on ClickHouse: one MergeTree table, reached over HTTP when a
// URL is configured, else through the embedded chDB engine in the data directory.
// Both speak @clickhouse/client's API and the same SQL; the shared contract test
// is test/integration/audit-store.test.ts.
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { ClickHouseLogLevel, createClient, type ClickHouseClient, type ClickHouseSettings } from '@clickhouse/client';
import {
  AUDIT_COLUMNS,
  AUDIT_SELECT_LIST,
  AUDIT_TABLE,
  auditTableDdl,
  auditTableMigrations,
  auditServerColumnMigrations,
  decodeAuditRow,
  decodeReportRow,
  ENTRY_HASH_OK_SQL,
  REPORT_SELECT_LIST,
  encodeAuditRow,
  encodeAuditRows,
  finiteOrZero,
  parseInstant,
  retentionDaysLiteral,
  toChDateTime,
  type AuditRow,
} from '../../audit/audit-codec.js';
import { AUDIT_EXACT_FILTERS, type AuditFilter, type AuditRecord } from '../../types.js';
import { isoFromCh } from '../../audit/ch-instant.js';
import { decodeSealRow, SEAL_COLUMNS, splitBatchBody, type Seal } from '../../audit/seal.js';
import { REPLAY_SAMPLE_GROUPS, type AuditPage, type AuditReportData, type AuditSummary, type BatchParts, type AuditStore, type EntryRef, type ReplayGroup, type ReplaySample, type SealChain, type VerifyGroup, type VerifyScan, type WrittenCount, type WrittenId } from '../audit-store.js';
import { guardBoundary, unreachableClassifier } from '../store-boundary.js';
import { isProcessAlive } from '../../pid.js';
import { engineThreadNicer } from './thread-nice.js';

/** How many denied calls the report lists. */
export const REPORT_RECENT_DENIED = 20;

export interface ClickHouseAuditStoreOptions {
  /** CLICKHOUSE_URL (user, password and database in it), or null for embedded chDB. */
  url: string | null;
  /** The service's data directory; chDB keeps its files in `<dataDir>/chdb`. */
  dataDir: string;
  retentionDays: number;
  /** chDB only: the nice value of the engine's threads (CHDB_THREAD_NICE; 0 leaves them). */
  threadNice?: number;
  /**
   * Open a store that is there, creating nothing (the offline verifier): a
   * database or an audit table that is missing is an error, not made. A
   * mistyped CLICKHOUSE_URL database was created, tables and all, and verified
   * clean.
   */
  existing?: boolean;
}

/** Newest first, in the table's key order read backwards (no full sort). Ties on the
 *  millisecond go by id, so pages never overlap; ClickHouse orders UUIDs by their
 *  second half first, so that tie order is not the ids' text order. */
const NEWEST_FIRST = 'ORDER BY timestamp DESC, id DESC';
/** GET /audit reads its page in slices of about this many bytes of entries (listInSlices)... */
const LIST_SLICE_BYTES = 4 * 1024 * 1024;
/** ...an entry weighing its strings and ~1 KB of the rest (JSON escapes can make an output's control characters 6 bytes each: a slice may be larger). */
const AUDIT_ROW_BYTES =
  'length(tool_url) + length(reasoning) + length(task_id) + length(output) + length(mcp_tool) + length(mcp_method) + length(mcp_session_id) + length(tool_name) + length(agent_name) + length(policy_path) + length(request_id) + 1024';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

type QueryParams = Record<string, string | number | readonly string[]>;

/** A server that refuses, drops or times out the connection cannot be reached. */
const classify = unreachableClassifier('audit store', (err) =>
  ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT'].includes(String((err as { code?: unknown } | null)?.code)),
);

export class ClickHouseAuditStore implements AuditStore {
  readonly #client: ClickHouseClient;
  /** Which engine this store reaches, for logs and health output. */
  readonly backend: 'chdb' | 'http';
  #closing: Promise<void> | null = null;

  /** chDB only: how batches reach the engine (see #insertTsv). */
  readonly #chdb: ChdbInserts | null;
  #insertFiles = 0;

  private constructor({ client, chdb }: OpenedClient, backend: 'chdb' | 'http') {
    this.#client = client;
    this.#chdb = chdb;
    this.backend = backend;
  }

  /** The store returned, and opening, throw StoreUnavailableError when the server cannot be reached. */
  static async open(opts: ClickHouseAuditStoreOptions): Promise<ClickHouseAuditStore> {
    retentionDaysLiteral(opts.retentionDays);
    try {
      const store = opts.url !== null
        ? new ClickHouseAuditStore({ client: await openHttpClient(opts.url, opts.existing !== true), chdb: null }, 'http')
        : new ClickHouseAuditStore(await openChdbClient(join(opts.dataDir, 'chdb'), join(opts.dataDir, 'chdb-inserts'), opts.threadNice ?? 0), 'chdb');
      try {
        if (opts.existing === true) await mustHaveAuditTable(store.#client);
        else await migrate(store.#client, opts.retentionDays);
        store.#chdb?.niceThreads(); // the threads its tables started
      } catch (err) {
        await store.close();
        throw err;
      }
      return guardBoundary(store, classify, ['encode']);
    } catch (err) {
      throw classify(err);
    }
  }

  async insert(rows: readonly AuditRecord[], dedupToken?: string): Promise<void> {
    if (rows.length === 0) return;
    await this.insertEncoded(encodeAuditRows(rows), dedupToken ?? '');
  }

  encode(record: AuditRecord, batchId = ''): string {
    return encodeAuditRow(record, batchId);
  }

  async insertEncoded(body: string | BatchParts, dedupToken: string): Promise<void> {
    const { rows, seals } = typeof body === 'string' ? splitBatchBody(body) : body;
    // Rows first, then their seals, under the same token (deduplication is per
    // table): a retry after either failed writes each exactly once.
    if (rows.length > 0) await this.#insertTsv(AUDIT_SHAPE, rows, dedupToken); // the batcher's parts are never empty
    if (seals.length > 0) await this.#insertTsv(SEALS_SHAPE, seals, dedupToken);
  }

  async #insertTsv(shape: TableShape, body: string | readonly Uint8Array[], dedupToken: string): Promise<void> {
    const { table, columns } = shape;
    const settings = {
      // Always sent, even empty, so that no insert can take another's token (a
      // session that kept the last one would drop the next batch as its
      // duplicate). Empty means ClickHouse's own rule: a block identical to a
      // recent one is dropped (rows carry unique ids, so only a true retry is identical).
      insert_deduplication_token: dedupToken,
      insert_deduplicate: 1,
      // Lines spooled or journalled by an earlier version lack the columns added
      // since (always appended last): those take their defaults.
      input_format_tsv_allow_variable_number_of_columns: 1,
      // Synchronous inserts, whatever the server's default: an async insert may
      // ignore the token (async_insert_deduplicate=0) and acknowledges before the
      // rows are durable.
      async_insert: 0,
    } satisfies ClickHouseSettings;
    // One TabSeparated body built here, not an object and a JSON line per row:
    // the rows are the proxy's hot output, and TSV is cheaper both to build and
    // for ClickHouse to parse (measured: audit cost per proxied call down from
    // ~15 to ~6 µs of main-thread CPU on the bench's small GET).
    const chdb = this.#chdb;
    if (chdb !== null && chdb.fileDir !== null) {
      // chDB: the engine reads the batch from a file with its own reader (one
      // parsing thread). Handed over inline (rawInsert, below: the data after the
      // statement) the same rows cost it ~4× as much to parse: 8.4 against 1.8 µs
      // a row of 33 plain strings; on the audit table 14.3–15.7 against
      // 9.2–12.1 µs a row, merges included (bench/micro/chdb-insert.ts). As an
      // INSERT … SELECT FROM file(), not INSERT … FROM INFILE: that form also
      // inserts whatever waits on the process's standard input (a pipe with data
      // in it), this one reads nothing but the file. The file is the page
      // cache's, gone once the insert answers.
      const file = join(chdb.fileDir, `${++this.#insertFiles}.tsv`);
      try {
        await writeFile(file, body);
        await chdb.query(
          `INSERT INTO ${table} (${columns.join(', ')}) SETTINGS ${settingsSql({ ...settings, input_format_parallel_parsing: 0 })} ` +
            `SELECT ${shape.fileSelect} FROM file(${sqlString(file)}, TabSeparated, ${sqlString(shape.fileStructure)})`,
        );
      } finally {
        await rm(file, { force: true }).catch(() => undefined);
        chdb.niceThreads();
      }
      return;
    }
    if (chdb !== null) {
      // chDB with a data directory whose path the engine would read as a glob
      // (`*`, `?`, `{`): the body goes inline, as its bytes.
      await chdb.rawInsert({ table, columns, values: typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.concat(body), format: 'TabSeparated', settings });
      chdb.niceThreads();
      return;
    }
    const values = Readable.from(typeof body === 'string' ? [body] : body, { objectMode: false });
    try {
      await this.#client.insert({ table, columns: [...columns] as [string, ...string[]], values, format: 'TabSeparated', clickhouse_settings: settings });
    } finally {
      // An error answer can come before the body is all sent, and the client
      // does not stop reading it then: the batcher reuses a batch's chunks once
      // this returns (row-bytes.ts), so nothing may read them after.
      values.destroy();
    }
  }

  async list(orgId: string, filter: AuditFilter, limit: number, offset: number): Promise<AuditPage> {
    const rows: AuditRecord[] = [];
    const total = await this.listInSlices(orgId, filter, limit, offset, (slice) => {
      for (const row of slice) rows.push(row);
    });
    return { rows, total };
  }

  async listInSlices(orgId: string, filter: AuditFilter, limit: number, offset: number, onRows: (rows: AuditRecord[]) => void): Promise<number> {
    if (!UUID_RE.test(orgId) || (filter.agentId !== undefined && !UUID_RE.test(filter.agentId))) return 0;
    const { where, params } = listWhere(orgId, filter);
    params.limit = nonNegativeInt(limit, 'limit');
    params.offset = nonNegativeInt(offset, 'offset');
    // Two queries rather than count() OVER (): the window form returns no total once
    // offset passes the last row, and it reads every matching row before the LIMIT.
    // Measured on chDB, one org of 200,000 rows, limit 50: rows + count 12.5 ms,
    // the window form 46.7 ms. Over HTTP the two run in parallel.
    // A page is read in slices of about LIST_SLICE_BYTES: the page's ids and
    // sizes first, then its rows by id, each slice parsed and handed on before
    // the next is read. Whole, 1,000 entries of 150 KB (outputs, reasoning, URLs
    // and MCP names at their bounds) held the event loop 1.0–1.4 s and the
    // process 1.4 GB more (admin-audit.test.ts); an entry recorded before the
    // MCP names' bound may hold a megabyte's, so even 50 are sized first.
    const counting = this.#query<{ total: number | string }>(`SELECT count() AS total FROM ${AUDIT_TABLE} WHERE ${where}`, params);
    const [page, counted] = await Promise.all([
      this.#query<{ id: string; ms: number | string; bytes: number | string }>(
        `SELECT id, toUnixTimestamp64Milli(timestamp) AS ms, ${AUDIT_ROW_BYTES} AS bytes FROM ${AUDIT_TABLE} WHERE ${where} ${NEWEST_FIRST} LIMIT {limit:UInt32} OFFSET {offset:UInt32}`,
        params,
      ),
      counting,
    ]);
    for (let start = 0; start < page.length; ) {
      let end = start + 1;
      let bytes = Number(page[start]!.bytes);
      while (end < page.length && bytes + Number(page[end]!.bytes) <= LIST_SLICE_BYTES) bytes += Number(page[end++]!.bytes);
      // By id, within the slice's times (the table's order): a row written since cannot slip in, nor a later one shift the page.
      const slice = page.slice(start, end);
      const rows = await this.#query<AuditRow>(
        `SELECT ${AUDIT_SELECT_LIST} FROM ${AUDIT_TABLE} WHERE org_id = {org:UUID} AND id IN {ids:Array(UUID)} ` +
          `AND timestamp BETWEEN fromUnixTimestamp64Milli(toInt64({oldest:UInt64}), 'UTC') AND fromUnixTimestamp64Milli(toInt64({newest:UInt64}), 'UTC')`,
        { org: orgId, ids: slice.map((r) => r.id), oldest: Number(page[end - 1]!.ms), newest: Number(page[start]!.ms) },
      );
      // In the page's order, each listed copy of an id once: a row stored twice (past the insert dedup's window)
      // whose copies the page splits between two slices is not listed a third time.
      const copies = new Map<string, AuditRow[]>();
      for (const row of rows) {
        const id = String(row.id);
        const known = copies.get(id);
        if (known === undefined) copies.set(id, [row]);
        else known.push(row);
      }
      const ordered: AuditRecord[] = [];
      for (const listed of slice) {
        const row = copies.get(listed.id)?.shift();
        if (row !== undefined) ordered.push(decodeAuditRow(row));
      }
      onRows(ordered);
      start = end;
    }
    return Number(counted[0]?.total ?? 0);
  }

  async replayGroups(orgId: string, agentId: string, since: Date, until: Date, onGroups: (groups: ReplayGroup[]) => void | Promise<void>): Promise<void> {
    if (!UUID_RE.test(orgId) || !UUID_RE.test(agentId)) return;
    const params = replayParams(orgId, agentId, since, until);
    // How many groups the window holds and what they weigh, from their hashes
    // (the engine aggregates 16 bytes a group): one query in the usual case (a
    // few thousand groups for a million calls); more, or longer ones, are read
    // in parts, split by a hash of the group, each about a part's size, so that
    // neither the service's memory nor its one parse of a part grows with the
    // window. A part of 100,000 groups of 500-character paths held the event
    // loop 0.4 s, one of 30,000 of 8 KiB 1.1 s (JSON.parse); in parts of
    // REPLAY_BYTES_PER_PART, 25–50 ms (policy-replay.test.ts).
    const sized = await this.#query<{ groups: number | string; bytes: number | string }>(
      `SELECT count() AS groups, sum(bytes) AS bytes FROM (SELECT any(${REPLAY_GROUP_BYTES}) AS bytes FROM ${AUDIT_TABLE} WHERE ${REPLAY_WINDOW} GROUP BY ${REPLAY_GROUP_HASH}, decision, policy_decided, policy_path != '')`,
      params,
    );
    const groups = Number(sized[0]?.groups ?? 0);
    const bytes = Number(sized[0]?.bytes ?? 0);
    const parts = Math.max(1, Math.ceil(1.25 * Math.max(groups / REPLAY_GROUPS_PER_PART, bytes / REPLAY_BYTES_PER_PART)));
    if (parts === 1) {
      await onGroups(await this.#replayGroupsPart(params, null));
      return;
    }
    for (let part = 0; part < parts; part++) await onGroups(await this.#replayGroupsPart(params, { parts, part }));
  }

  async #replayGroupsPart(params: QueryParams, split: { parts: number; part: number } | null): Promise<ReplayGroup[]> {
    const where = split === null ? REPLAY_WINDOW : `${REPLAY_WINDOW} AND ${REPLAY_GROUP_HASH} % {parts:UInt32} = {part:UInt32}`;
    const rows = await this.#query<{ tool_name: string; action: string; path: string; normalised: number | boolean; mcp_method: string; mcp_tool: string; decision: string; policy_decided: number | boolean; calls: number | string; newest: string; key: string }>(
      `SELECT tool_name, action, ${REPLAY_PATH} AS path, policy_path != '' AS normalised, mcp_method, mcp_tool, decision, policy_decided, count() AS calls, toString(max(timestamp)) AS newest,
              toString(${REPLAY_SAMPLE_KEY}) AS key
       FROM ${AUDIT_TABLE} WHERE ${where}
       GROUP BY tool_name, action, path, normalised, mcp_method, mcp_tool, decision, policy_decided`,
      { ...params, ...(split ?? {}) },
    );
    return rows.map((r) => ({
      toolName: r.tool_name,
      action: r.action,
      path: r.path,
      normalised: truthyValue(r.normalised),
      mcpMethod: r.mcp_method,
      mcpTool: r.mcp_tool,
      decision: r.decision as 'allowed' | 'denied',
      policyDecided: truthyValue(r.policy_decided),
      calls: Number(r.calls),
      newest: r.newest,
      key: r.key,
    }));
  }

  async replaySamples(orgId: string, agentId: string, since: Date, until: Date, keys: readonly string[], limit: number): Promise<ReplaySample[]> {
    if (!UUID_RE.test(orgId) || !UUID_RE.test(agentId) || keys.length === 0) return [];
    const params = replayParams(orgId, agentId, since, until);
    // Hashes, not the groups' fields: 2,000 paths (or one tool name of a megabyte)
    // would pass ClickHouse's 128 KiB limit on a query parameter over HTTP.
    params.keys = keys.slice(0, REPLAY_SAMPLE_GROUPS);
    params.limit = nonNegativeInt(limit, 'limit');
    const rows = await this.#query<{ id: string; timestamp: string; tool_name: string; action: string; decision: string; key: string }>(
      `SELECT id, timestamp, tool_name, action, decision, toString(${REPLAY_SAMPLE_KEY}) AS key
       FROM ${AUDIT_TABLE}
       WHERE ${REPLAY_WINDOW} AND policy_decided AND toString(${REPLAY_SAMPLE_KEY}) IN {keys:Array(String)}
       ${NEWEST_FIRST} LIMIT {limit:UInt32}`,
      params,
    );
    return rows.map((r) => ({
      id: r.id,
      timestamp: isoFromCh(r.timestamp),
      toolName: r.tool_name,
      action: r.action,
      decision: r.decision as 'allowed' | 'denied',
      key: r.key,
    }));
  }

  async summary(orgId: string, since: Date, until: Date, maxAgents: number): Promise<AuditSummary> {
    if (!UUID_RE.test(orgId)) return { calls: 0, denied: 0, agentsTotal: 0, agents: [] };
    const params: QueryParams = { org: orgId, since: toChDateTime(since), until: toChDateTime(until), maxAgents: nonNegativeInt(maxAgents, 'maxAgents') };
    const [totals, agents] = await Promise.all([
      this.#query<{ calls: number | string; denied: number | string; agents: number | string }>(
        `SELECT count() AS calls, countIf(decision = 'denied') AS denied, uniqExact(agent_id) AS agents FROM ${AUDIT_TABLE} WHERE ${REPORT_WINDOW}`,
        params,
      ),
      this.#query<PerAgentRow>(`${perAgentSql(REPORT_WINDOW)} LIMIT {maxAgents:UInt32}`, params),
    ]);
    const t = totals[0];
    return {
      calls: Number(t?.calls ?? 0),
      denied: Number(t?.denied ?? 0),
      agentsTotal: Number(t?.agents ?? 0),
      agents: agents.map((a) => ({ agentId: a.agent_id, agentName: a.agent_name, calls: Number(a.calls), denied: Number(a.denied), p95LatencyMs: finiteOrZero(a.p95) })),
    };
  }

  async report(orgId: string, since: Date, until: Date, maxEntries: number, topN: number): Promise<AuditReportData> {
    const empty: AuditReportData = {
      totals: { calls: 0, allowed: 0, denied: 0, p50LatencyMs: 0, p95LatencyMs: 0 },
      perDay: [], perAgent: [], topTools: [], recentDenied: [], entries: [],
    };
    if (!UUID_RE.test(orgId)) return empty;
    const params: QueryParams = {
      org: orgId,
      since: toChDateTime(since),
      until: toChDateTime(until),
      maxEntries: nonNegativeInt(maxEntries, 'maxEntries'),
      topN: nonNegativeInt(topN, 'topN'),
      recentDenied: REPORT_RECENT_DENIED,
    };
    const window = REPORT_WINDOW;
    const [totals, perDay, perAgent, topTools, recentDenied, entries] = await Promise.all([
      this.#query<{ calls: number | string; allowed: number | string; denied: number | string; p50: number | string; p95: number | string }>(
        `WITH ${LATENCY_HISTOGRAM}
         SELECT sum(c) AS calls, sum(a) AS allowed, sum(d) AS denied,
                ${histogramQuantile('0.5', 'calls')} AS p50, ${histogramQuantile('0.95', 'calls')} AS p95
         FROM (SELECT latency_ms, count() AS c, countIf(decision = 'allowed') AS a, countIf(decision = 'denied') AS d
               FROM ${AUDIT_TABLE} WHERE ${window} GROUP BY latency_ms)`,
        params,
      ),
      this.#query<{ day: string; allowed: number | string; denied: number | string }>(
        `SELECT toString(toDate(timestamp)) AS day, countIf(decision = 'allowed') AS allowed, countIf(decision = 'denied') AS denied
         FROM ${AUDIT_TABLE} WHERE ${window} GROUP BY day ORDER BY day`,
        params,
      ),
      // argMax: the name the agent had at its latest call, deterministic unlike any().
      this.#query<PerAgentRow>(perAgentSql(window), params),
      // Split by MCP tool where the proxy read one (mcp_tool '' otherwise): an MCP
      // server is one host, and its tools are what the report should tell apart.
      this.#query<{ tool_name: string; mcp_tool: string; calls: number | string; denied: number | string }>(
        `SELECT tool_name, mcp_tool, count() AS calls, countIf(decision = 'denied') AS denied
         FROM ${AUDIT_TABLE} WHERE ${window} GROUP BY tool_name, mcp_tool ORDER BY calls DESC, tool_name, mcp_tool LIMIT {topN:UInt32}`,
        params,
      ),
      this.#query<Partial<AuditRow>>(
        `SELECT ${REPORT_SELECT_LIST} FROM ${AUDIT_TABLE} WHERE ${window} AND decision = 'denied'
         ${NEWEST_FIRST} LIMIT {recentDenied:UInt32}`,
        params,
      ),
      this.#query<Partial<AuditRow>>(
        `SELECT ${REPORT_SELECT_LIST} FROM ${AUDIT_TABLE} WHERE ${window} ${NEWEST_FIRST} LIMIT {maxEntries:UInt32}`,
        params,
      ),
    ]);
    const t = totals[0];
    return {
      totals: {
        calls: Number(t?.calls ?? 0),
        allowed: Number(t?.allowed ?? 0),
        denied: Number(t?.denied ?? 0),
        p50LatencyMs: finiteOrZero(t?.p50),
        p95LatencyMs: finiteOrZero(t?.p95),
      },
      perDay: perDay.map((d) => ({ day: d.day, allowed: Number(d.allowed), denied: Number(d.denied) })),
      perAgent: perAgent.map((a) => ({
        agentId: a.agent_id,
        agentName: a.agent_name,
        calls: Number(a.calls),
        allowed: Number(a.allowed),
        denied: Number(a.denied),
        p50LatencyMs: finiteOrZero(a.p50),
      })),
      topTools: topTools.map((x) => ({ toolName: x.tool_name, mcpTool: x.mcp_tool === '' ? null : x.mcp_tool, calls: Number(x.calls), denied: Number(x.denied) })),
      recentDenied: recentDenied.map(decodeReportRow),
      entries: entries.map(decodeReportRow),
    };
  }

  async listSeals(orgId: string, window?: { since: Date; until: Date }, limit = 0xffffffff, newestFirst = false): Promise<Seal[]> {
    if (!UUID_RE.test(orgId)) return [];
    const { where, params } = sealWindow(orgId, window);
    params.limit = nonNegativeInt(limit, 'limit');
    const rows = await this.#query<Record<string, string | number>>(
      `SELECT ${SEAL_COLUMN_NAMES.join(', ')} FROM ${SEALS_TABLE} WHERE ${where} ${newestFirst ? 'ORDER BY last_at DESC, writer, seq DESC' : 'ORDER BY first_at, writer, seq'} LIMIT {limit:UInt32}`,
      params,
    );
    return rows.map(decodeSealRow);
  }

  async countSeals(orgId: string, window: { since: Date; until: Date }): Promise<number> {
    if (!UUID_RE.test(orgId)) return 0;
    const { where, params } = sealWindow(orgId, window);
    const rows = await this.#query<{ n: number | string }>(`SELECT count() AS n FROM ${SEALS_TABLE} WHERE ${where}`, params);
    return Number(rows[0]?.n ?? 0);
  }

  async sealChains(orgId: string, window?: { since: Date; until: Date }): Promise<SealChain[]> {
    if (!UUID_RE.test(orgId)) return [];
    const params: QueryParams = { org: orgId };
    let around = '0 AS before_seq, 0 AS after_seq, 0 AS meeting_n, 0 AS meeting_first, 0 AS meeting_last';
    if (window !== undefined) {
      const meets = "first_at < {until:DateTime64(3, 'UTC')} AND last_at >= {since:DateTime64(3, 'UTC')}";
      around = `maxIf(seq, last_at < {since:DateTime64(3, 'UTC')}) AS before_seq, minIf(seq, first_at >= {until:DateTime64(3, 'UTC')}) AS after_seq,
                countIf(${meets}) AS meeting_n, minIf(seq, ${meets}) AS meeting_first, maxIf(seq, ${meets}) AS meeting_last`;
      params.since = toChDateTime(window.since);
      params.until = toChDateTime(window.until);
    }
    const rows = await this.#query<{ writer: string; first_seq: number | string; last_seq: number | string; n: number | string; distinct_seqs: number | string; last_hash: string; first_created: string; before_seq: number | string; after_seq: number | string; meeting_n: number | string; meeting_first: number | string; meeting_last: number | string }>(
      `SELECT toString(writer) AS writer, min(seq) AS first_seq, max(seq) AS last_seq, count() AS n, uniqExact(seq) AS distinct_seqs, argMax(seal_hash, seq) AS last_hash,
              toString(min(created_at)) AS first_created, ${around}
       FROM ${SEALS_TABLE} WHERE org_id = {org:UUID} GROUP BY writer`,
      params,
    );
    return rows.map((r) => ({
      writer: r.writer, firstSeq: Number(r.first_seq), lastSeq: Number(r.last_seq), count: Number(r.n), distinctSeqs: Number(r.distinct_seqs), lastHash: r.last_hash, firstCreatedAt: isoFromCh(r.first_created),
      beforeSeq: Number(r.before_seq), afterSeq: Number(r.after_seq),
      meeting: Number(r.meeting_n) === 0 ? null : { firstSeq: Number(r.meeting_first), lastSeq: Number(r.meeting_last) },
    }));
  }

  async firstSealGap(orgId: string, writer: string, afterSeq: number): Promise<number | null> {
    if (!UUID_RE.test(orgId) || !UUID_RE.test(writer)) return null;
    const rows = await this.#query<{ seq: number | string }>(
      `SELECT seq FROM ${SEALS_TABLE}
       WHERE org_id = {org:UUID} AND writer = {writer:UUID} AND seq > {after:UInt64}
         AND seq - 1 NOT IN (SELECT seq FROM ${SEALS_TABLE} WHERE org_id = {org:UUID} AND writer = {writer:UUID})
       ORDER BY seq LIMIT 1`,
      { org: orgId, writer, after: afterSeq },
    );
    return rows.length === 0 ? null : Number(rows[0]!.seq);
  }

  async sealRange(orgId: string, writer: string, fromSeq: number, toSeq: number, limit?: number): Promise<Seal[]> {
    if (!UUID_RE.test(orgId) || !UUID_RE.test(writer)) return [];
    // A seq is a UInt64, and one written by hand may be past 2^53, which a JS number
    // cannot name (the client refuses it): such bounds read to the chain's end.
    const bounded = toSeq <= Number.MAX_SAFE_INTEGER;
    // With a limit: the first `limit` seals and every other one of the last one's
    // seq (WITH TIES), so the next read starts at the seq after it, by key: rows
    // inserted meanwhile below it move no later row into a page already read.
    const rows = await this.#query<Record<string, string | number>>(
      `SELECT ${SEAL_COLUMN_NAMES.join(', ')} FROM ${SEALS_TABLE}
       WHERE org_id = {org:UUID} AND writer = {writer:UUID} AND seq >= {from:UInt64} ${bounded ? 'AND seq <= {to:UInt64}' : ''}
       ${limit === undefined ? 'ORDER BY seq, id' : 'ORDER BY seq LIMIT {limit:UInt32} WITH TIES'}`,
      { org: orgId, writer, from: Math.min(Math.max(0, fromSeq), Number.MAX_SAFE_INTEGER), ...(bounded ? { to: Math.max(0, toSeq) } : {}), ...(limit === undefined ? {} : { limit: nonNegativeInt(limit, 'limit') }) },
    );
    const seals = rows.map(decodeSealRow);
    // In the order of ORDER BY seq, id (chDB orders UUIDs as their text).
    return limit === undefined ? seals : seals.sort((a, b) => a.seq - b.seq || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  async sealsOfBatches(orgId: string, batchIds: readonly string[]): Promise<Seal[]> {
    const ids = batchIds.filter((id) => UUID_RE.test(id));
    if (!UUID_RE.test(orgId) || ids.length === 0) return [];
    const rows = await this.#query<Record<string, string | number>>(
      `SELECT ${SEAL_COLUMN_NAMES.join(', ')} FROM ${SEALS_TABLE} WHERE org_id = {org:UUID} AND batch_id IN {ids:Array(UUID)}`,
      { org: orgId, ids },
    );
    return rows.map(decodeSealRow);
  }

  async verifyGroups(orgId: string, scan: VerifyScan, onPage: (groups: VerifyGroup[]) => void, pageRows = 250_000): Promise<void> {
    if (!UUID_RE.test(orgId)) return;
    nonNegativeInt(pageRows, 'pageRows');
    const range = "org_id = {org:UUID} AND timestamp >= {from:DateTime64(3, 'UTC')} AND timestamp < {to:DateTime64(3, 'UTC')}";
    // Pages are time slices of whole minutes holding about pageRows entries, or
    // VERIFY_PAGE_BATCHES batches, oldest first: every entry with one timestamp is
    // in one page, so a batch's sorted leaves continue from page to page.
    const minutes = await this.#query<{ m: number | string; n: number | string; b: number | string }>(
      `SELECT toUnixTimestamp(toStartOfMinute(timestamp)) AS m, count() AS n, uniqExact(batch_id) AS b FROM ${AUDIT_TABLE} WHERE ${range} GROUP BY m ORDER BY m`,
      { org: orgId, from: toChDateTime(scan.from), to: toChDateTime(scan.to) },
    );
    const slices: [Date, Date][] = [];
    let sliceStart = scan.from.getTime();
    let inSlice = 0;
    let batchesInSlice = 0;
    for (let i = 0; i < minutes.length; i++) {
      inSlice += Number(minutes[i]!.n);
      batchesInSlice += Number(minutes[i]!.b);
      const next = minutes[i + 1];
      if (next === undefined || inSlice >= pageRows || batchesInSlice >= VERIFY_PAGE_BATCHES) {
        const end = next === undefined ? scan.to.getTime() : Number(next.m) * 1000;
        slices.push([new Date(sliceStart), new Date(end)]);
        sliceStart = end;
        inSlice = 0;
        batchesInSlice = 0;
      }
    }
    const instants = {
      ws: toChDateTime(scan.since),
      wu: toChDateTime(scan.until),
      legacyFrom: toChDateTime(scan.legacyFrom),
      legacy: toChDateTime(scan.legacyBefore),
      grace: toChDateTime(scan.graceFrom),
      graceUntil: toChDateTime(scan.graceUntil),
    };
    for (const [from, to] of slices) {
      // The server hashes, groups and sorts; what comes back is a row per batch
      // with its leaves. Measured on chDB, 1,000,000 entries in 1,000 batches: the
      // entries one by one (six columns) took 7.5 s to read, these groups 2–3 s.
      const rows = await this.#query<VerifyGroupRow>(
        `SELECT batch_id,
                count() AS n,
                countIf(${IN_WINDOW}) AS in_window,
                toString(min(timestamp)) AS first_at, argMin(toString(id), (timestamp, toString(id))) AS first_id,
                toString(max(timestamp)) AS last_at, argMax(toString(id), (timestamp, toString(id))) AS last_id,
                arrayMap(x -> x.3, arraySort(x -> (x.1, x.2), groupArrayIf((timestamp, toString(id), base64Encode(SHA256(concat(char(0), unhex(entry_hash))))), entry_hash != ''))) AS leaves,
                countIf((entry_hash = '' OR batch_id = '') AND ${IN_WINDOW} AND ${IN_LEGACY}) AS legacy_in_window,
                minIf((timestamp, toString(id)), entry_hash = '' AND ${IN_WINDOW} AND NOT ${IN_LEGACY}) AS late_unhashed,
                countIf(entry_hash = '' AND ${IN_WINDOW} AND NOT ${IN_LEGACY}) AS late_unhashed_n,
                groupArrayIf(toString(id), entry_hash != '' AND NOT (${ENTRY_HASH_OK_SQL})) AS mismatched,
                countIf(entry_hash != '' AND ${IN_WINDOW} AND ${RECENT} AND NOT ${LEGACY_ROW}) AS recent_in_window,
                minIf((timestamp, toString(id)), ${OLD_UNSEALED}) AS old_in_window,
                countIf(${OLD_UNSEALED}) AS old_in_window_n
         FROM ${AUDIT_TABLE} WHERE ${range} GROUP BY batch_id
         SETTINGS output_format_json_escape_forward_slashes = 0`,
        { org: orgId, from: toChDateTime(from), to: toChDateTime(to), ...instants },
      );
      onPage(rows.map((r) => ({
        batchId: r.batch_id === '' ? null : r.batch_id,
        count: Number(r.n),
        inWindow: Number(r.in_window),
        first: { id: r.first_id, timestamp: isoFromCh(r.first_at) },
        last: { id: r.last_id, timestamp: isoFromCh(r.last_at) },
        leaves: r.leaves,
        legacyInWindow: Number(r.legacy_in_window),
        lateUnhashed: Number(r.late_unhashed_n) > 0 ? entryRef(r.late_unhashed) : null,
        mismatched: r.mismatched,
        recentInWindow: Number(r.recent_in_window),
        oldInWindow: Number(r.old_in_window_n) > 0 ? entryRef(r.old_in_window) : null,
      })));
    }
  }

  async entriesByIds(orgId: string, ids: readonly string[]): Promise<AuditRecord[]> {
    if (!UUID_RE.test(orgId) || ids.length === 0) return [];
    const rows = await this.#query<AuditRow>(
      `SELECT ${AUDIT_SELECT_LIST} FROM ${AUDIT_TABLE} WHERE org_id = {org:UUID} AND id IN {ids:Array(UUID)}`,
      { org: orgId, ids: ids.filter((id) => UUID_RE.test(id)) },
    );
    return rows.map(decodeAuditRow);
  }

  async clockMs(): Promise<number> {
    const rows = await this.#query<{ now: number | string }>('SELECT toUnixTimestamp64Milli(now64(3)) AS now');
    return Number(rows[0]?.now ?? 0);
  }

  async writtenSince(orgIds: readonly string[], sinceMs: number, floorMs = sinceMs): Promise<WrittenId[]> {
    const orgs = orgIds.filter((o) => UUID_RE.test(o));
    if (orgs.length === 0) return [];
    const rows = await this.#query<{ id: string; org_id: string; written: number | string; date: number | string }>(
      `SELECT id, org_id, toUnixTimestamp64Milli(written_at) AS written, toUnixTimestamp64Milli(timestamp) AS date FROM ${AUDIT_TABLE}
       WHERE ${WRITTEN_WINDOW} ORDER BY written_at, timestamp, id`,
      { orgs, since: epochMs(sinceMs), floor: epochMs(floorMs) },
    );
    return rows.map((r) => ({ id: r.id, orgId: r.org_id, writtenMs: Number(r.written), dateMs: Number(r.date) }));
  }

  async writtenCounts(orgIds: readonly string[], sinceMs: number): Promise<WrittenCount[]> {
    const orgs = orgIds.filter((o) => UUID_RE.test(o));
    if (orgs.length === 0) return [];
    const rows = await this.#query<{ org_id: string; written: number | string; n: number | string }>(
      `SELECT org_id, toUnixTimestamp64Milli(written_at) AS written, count() AS n FROM ${AUDIT_TABLE}
       WHERE ${WRITTEN_WINDOW} GROUP BY org_id, written_at ORDER BY written_at, org_id`,
      { orgs, since: epochMs(sinceMs), floor: epochMs(sinceMs) },
    );
    return rows.map((r) => ({ orgId: r.org_id, writtenMs: Number(r.written), rows: Number(r.n) }));
  }

  async writtenEntries(orgIds: readonly string[], ids: readonly string[], sinceMs: number): Promise<AuditRecord[]> {
    const orgs = orgIds.filter((o) => UUID_RE.test(o));
    const wanted = ids.filter((id) => UUID_RE.test(id));
    if (orgs.length === 0 || wanted.length === 0) return [];
    const rows = await this.#query<AuditRow>(
      `SELECT ${AUDIT_SELECT_LIST} FROM ${AUDIT_TABLE}
       WHERE ${WRITTEN_WINDOW} AND id IN {ids:Array(UUID)} ORDER BY written_at, timestamp, id`,
      { orgs, ids: wanted, since: epochMs(sinceMs), floor: epochMs(sinceMs) },
    );
    return rows.map(decodeAuditRow);
  }

  async orgIds(): Promise<string[]> {
    const rows = await this.#query<{ org_id: string }>(
      `SELECT DISTINCT org_id FROM (SELECT org_id FROM ${AUDIT_TABLE} UNION ALL SELECT org_id FROM ${SEALS_TABLE}) ORDER BY org_id`,
    );
    return rows.map((r) => r.org_id);
  }

  async sealStored(orgId: string, writer: string, seq: number, sealHash: string): Promise<boolean> {
    if (!UUID_RE.test(orgId) || !UUID_RE.test(writer) || !Number.isSafeInteger(seq) || seq < 0) return false;
    const rows = await this.#query<{ one: number }>(
      `SELECT 1 AS one FROM ${SEALS_TABLE} WHERE org_id = {org:UUID} AND writer = {writer:UUID} AND seq = {seq:UInt64} AND seal_hash = {hash:String} LIMIT 1`,
      { org: orgId, writer, seq, hash: sealHash },
    );
    return rows.length > 0;
  }

  async count(orgId?: string): Promise<number> {
    if (orgId !== undefined && !UUID_RE.test(orgId)) return 0;
    const rows = orgId === undefined
      ? await this.#query<{ n: number | string }>(`SELECT count() AS n FROM ${AUDIT_TABLE}`)
      : await this.#query<{ n: number | string }>(`SELECT count() AS n FROM ${AUDIT_TABLE} WHERE org_id = {org:UUID}`, { org: orgId });
    return Number(rows[0]?.n ?? 0);
  }

  async ping(): Promise<void> {
    // A query, not /ping: the server answers /ping without checking the user, so a
    // rotated password or a dropped user left /ready at 200 while every insert failed.
    const result = await this.#client.ping({ select: true });
    if (!result.success) throw result.error;
  }

  /** Safe to call more than once; later calls wait for the first. */
  close(): Promise<void> {
    this.#closing ??= this.#client.close();
    return this.#closing;
  }

  async #query<T>(query: string, query_params?: QueryParams): Promise<T[]> {
    const result = await this.#client.query({
      query,
      format: 'JSONEachRow',
      ...(query_params ? { query_params } : {}),
      ...(this.backend === 'http' ? { clickhouse_settings: HTTP_READ_SETTINGS } : {}),
    });
    return throwIfExceptionRow(await result.json<T>());
  }
}

/**
 * A ClickHouse server before 25.11 that fails a query after its first rows are
 * sent keeps the 200 and ends the JSONEachRow output with a row
 * `{"exception": "Code: ..."}` (http_write_exception_in_output_format), which
 * @clickhouse/client returns as data: a cut list with a row of nothing in GET
 * /audit, or a stream that moves past rows it never read. No query of this
 * store selects a column named `exception`, so such a row is the error.
 */
export function throwIfExceptionRow<T>(rows: T[]): T[] {
  const last = rows[rows.length - 1] as Record<string, unknown> | undefined;
  if (last !== undefined && typeof last === 'object' && last !== null && Object.hasOwn(last, 'exception')) {
    throw new Error(`ClickHouse failed the query after its first rows: ${String(last.exception).slice(0, 500)}`);
  }
  return rows;
}

type RawInsert = (params: { table: string; columns: readonly string[]; values: Buffer; format: 'TabSeparated'; settings: Record<string, string | number> }) => Promise<unknown>;

/** How the store hands batches to chDB: a statement the engine runs, the folder of the files it reads (null: inline), and the inline insert. */
interface ChdbInserts {
  query: (sql: string) => Promise<unknown>;
  fileDir: string | null;
  rawInsert: RawInsert;
  /** Lowers the priority of the engine's threads started since the last call (thread-nice.ts). */
  niceThreads: () => void;
}

interface OpenedClient {
  client: ClickHouseClient;
  chdb: ChdbInserts | null;
}

/** Characters the engine's file reader takes as a glob in a path. */
const GLOB_CHARS = /[*?{}]/;

async function openChdbClient(dir: string, insertRoot: string, threadNice: number): Promise<OpenedClient> {
  mkdirSync(dir, { recursive: true });
  // Imported here, not at the top: loading chDB costs ~200 MB of RSS, which a
  // process on a ClickHouse server should not pay. One data directory per process.
  const niceThreads = await engineThreadNicer(threadNice);
  const { createChdbConnection } = await import('chdb/connection');
  // chdb types its connection with @clickhouse/client-common while @clickhouse/client
  // bundles its own copy of the same declarations; TypeScript treats the two copies'
  // classes as distinct, so the cast only bridges the duplicate declarations.
  const connection = createChdbConnection({ path: dir });
  niceThreads();
  return {
    client: createClient({ connection: connection as unknown as ClientConnection, log: CLIENT_LOG }),
    chdb: {
      query: (sql) => connection.chdb.queryAsync(sql),
      fileDir: GLOB_CHARS.test(insertRoot) ? null : insertFolder(insertRoot),
      rawInsert: (params) => connection.chdb.rawInsert(params),
      niceThreads,
    },
  };
}

/**
 * This store's own folder for the files chDB reads (`<root>/<pid>-<random>`),
 * after removing the folders of processes no longer running (a killed one's
 * files were in its journal or spool too). Another store of this process, or a
 * process that is still running, keeps its own.
 */
function insertFolder(root: string): string {
  mkdirSync(root, { recursive: true, mode: 0o700 });
  for (const name of readdirSync(root)) {
    const pid = Number(/^(\d+)-/.exec(name)?.[1] ?? NaN);
    if (Number.isSafeInteger(pid) && pid !== process.pid && !isProcessAlive(pid)) rmSync(join(root, name), { recursive: true, force: true });
  }
  return mkdtempSync(join(root, `${process.pid}-`));
}

/**
 * The report's latency quantiles are ClickHouse's quantileExact (the element at
 * floor(level × n) of the sorted values, as the console's summary computes
 * them), taken from a histogram: quantileExact holds every value of its group,
 * 4 bytes a call, so a year's report of an org making 1,000 calls a second asked
 * the engine (chDB: this process) for ~126 GB. `h` is the (latency, calls)
 * pairs of a group, sorted, `cum` their running totals; memory is one pair per
 * distinct latency. (quantileExactWeighted keeps such a table too but ranks
 * differently: ceil(level × n), 19 of 1..20 at 0.95 where quantileExact says 20.)
 */
const LATENCY_HISTOGRAM = 'arraySort(groupArray((latency_ms, c))) AS h, arrayCumSum(arrayMap(p -> p.2, h)) AS cum';

/** The report's and the summary's window: the org's calls in [since, until). */
const REPORT_WINDOW = "org_id = {org:UUID} AND timestamp >= {since:DateTime64(3, 'UTC')} AND timestamp < {until:DateTime64(3, 'UTC')}";

interface PerAgentRow {
  agent_id: string;
  agent_name: string;
  calls: number | string;
  allowed: number | string;
  denied: number | string;
  p50: number | string;
  p95: number | string;
}

/**
 * Each agent's calls in the window, most first: its name at its latest call, its
 * counts, and its p50 and p95 latency (quantileExact, from a histogram of
 * latencies ranked in memory bounded by distinct values). The PDF report and
 * GET /audit/summary read the same figures.
 */
function perAgentSql(window: string): string {
  return `WITH ${LATENCY_HISTOGRAM}
         SELECT agent_id, argMax(name, at) AS agent_name, sum(c) AS calls, sum(a) AS allowed, sum(d) AS denied,
                ${histogramQuantile('0.5', 'calls')} AS p50, ${histogramQuantile('0.95', 'calls')} AS p95
         FROM (SELECT agent_id, latency_ms, argMax(agent_name, timestamp) AS name, max(timestamp) AS at, count() AS c,
                      countIf(decision = 'allowed') AS a, countIf(decision = 'denied') AS d
               FROM ${AUDIT_TABLE} WHERE ${window} GROUP BY agent_id, latency_ms)
         GROUP BY agent_id ORDER BY calls DESC, agent_id`;
}

function histogramQuantile(level: string, total: string): string {
  return `h[arrayFirstIndex(k -> k > floor(${level} * ${total}), cum)].1`;
}

/** A table's columns for an insert, and for chDB's file reader: the file's structure and the SELECT over it. */
interface TableShape {
  table: string;
  columns: readonly string[];
  fileStructure: string;
  fileSelect: string;
}

/**
 * Lines an earlier version wrote lack the columns added since (always last):
 * read from a file, a missing field takes its type's default, not the table's
 * DEFAULT expression, so a column that has one is read as Nullable and the
 * SELECT puts the expression in its place (what an INSERT … FORMAT does itself).
 * LowCardinality columns are read as String: the insert converts a whole
 * column at once, which costs the engine less than building the dictionary
 * value by value as it parses (~1.5 µs a row of the audit table's nine,
 * bench/micro/chdb-insert.ts).
 */
function tableShape(table: string, columns: readonly (readonly [name: string, type: string])[]): TableShape {
  const structure: string[] = [];
  const select: string[] = [];
  for (const [name, declared] of columns) {
    const withoutCodec = declared.replace(/\s+CODEC\(.*\)\s*$/, '').replace(/LowCardinality\((String)\)/g, '$1');
    const at = withoutCodec.indexOf(' DEFAULT ');
    if (at < 0) {
      structure.push(`${name} ${withoutCodec}`);
      select.push(name);
    } else {
      structure.push(`${name} Nullable(${withoutCodec.slice(0, at)})`);
      select.push(`ifNull(${name}, ${withoutCodec.slice(at + ' DEFAULT '.length)})`);
    }
  }
  return { table, columns: columns.map(([name]) => name), fileStructure: structure.join(', '), fileSelect: select.join(', ') };
}

const AUDIT_SHAPE = tableShape(AUDIT_TABLE, AUDIT_COLUMNS.map((c) => [c.name, c.type] as const));

type ClientConnection = NonNullable<NonNullable<Parameters<typeof createClient>[0]>['connection']>;

/** HTTP settings; chDB already returns 64-bit integers unquoted. */
const HTTP_SETTINGS: ClickHouseSettings = { output_format_json_quote_64bit_integers: 0 };

/**
 * Sent with every read over HTTP, where they win over the user's profile and
 * the URL's ch_ settings: the instants are read as 'YYYY-MM-DD hh:mm:ss.sss'
 * (isoFromCh), and a profile with `iso` or `unix_timestamp` gave every GET /audit
 * a malformed time and every verify a false entry_added.
 */
const HTTP_READ_SETTINGS: ClickHouseSettings = { date_time_output_format: 'simple' };

/** Every failure is thrown to the caller, which logs it once through the service's
 *  log; the client's own console logging would repeat each spool retry. */
const CLIENT_LOG = { level: ClickHouseLogLevel.OFF };

/** A slow server must not hold the audit batcher's single in-flight insert for long: past this the batch is spooled. */
const HTTP_REQUEST_TIMEOUT_MS = 10_000;

async function openHttpClient(url: string, create = true): Promise<ClickHouseClient> {
  const parsed = new URL(url);
  const database = decodeURIComponent(parsed.pathname.replace(/^\/+|\/+$/g, ''));
  if (database !== '' && database !== 'default') {
    // The client sends every query to the URL's database, so make sure it exists
    // from a connection that names none. Checked first: a user allowed to write to
    // an existing database may lack CREATE DATABASE.
    parsed.pathname = '/';
    const bootstrap = createClient({ url: parsed, clickhouse_settings: HTTP_SETTINGS, log: CLIENT_LOG, request_timeout: HTTP_REQUEST_TIMEOUT_MS });
    try {
      const found = await (await bootstrap.query({
        query: 'SELECT count() AS n FROM system.databases WHERE name = {db:String}',
        query_params: { db: database },
        format: 'JSONEachRow',
      })).json<{ n: number | string }>();
      if (Number(found[0]?.n ?? 0) === 0) {
        if (!create) throw new Error(`ClickHouse has no database ${database}`);
        await bootstrap.command({ query: `CREATE DATABASE IF NOT EXISTS ${quoteIdentifier(database)}` });
      }
    } finally {
      await bootstrap.close();
    }
  }
  return createClient({ url, clickhouse_settings: HTTP_SETTINGS, log: CLIENT_LOG, request_timeout: HTTP_REQUEST_TIMEOUT_MS });
}

/** The tables and columns this version reads, there and whole (a store a service of this version has opened). */
async function mustHaveAuditTable(client: ClickHouseClient): Promise<void> {
  const rows = await (await client.query({
    query: 'SELECT table, name FROM system.columns WHERE database = currentDatabase() AND table IN ({tables:Array(String)})',
    query_params: { tables: [AUDIT_TABLE, SEALS_TABLE] },
    format: 'JSONEachRow',
  })).json<{ table: string; name: string }>();
  if (!rows.some((r) => r.table === AUDIT_TABLE)) throw new Error(`the store has no ${AUDIT_TABLE} table: no service has written to it`);
  const has = new Set(rows.map((r) => `${r.table}.${r.name}`));
  const missing = [...AUDIT_COLUMNS.map((c) => `${AUDIT_TABLE}.${c.name}`), ...SEAL_COLUMNS.map(([name]) => `${SEALS_TABLE}.${name}`)].filter((c) => !has.has(c));
  if (missing.length > 0) throw new Error(`the store was made by an older version (no ${missing.slice(0, 3).join(', ')}${missing.length > 3 ? ', ...' : ''}): start the service on it once to bring it up to date`);
}

/**
 * Brings the table to the configured shape. Every step is idempotent, so any
 * number of processes may run it at once.
 */
async function migrate(client: ClickHouseClient, retentionDays: number): Promise<void> {
  await client.command({ query: auditTableDdl(retentionDays) });
  await client.command({ query: SEALS_TABLE_DDL });
  const tables = await (await client.query({
    query: 'SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = {table:String}',
    query_params: { table: AUDIT_TABLE },
    format: 'JSONEachRow',
  })).json<{ engine_full: string }>();
  const columns = await (await client.query({
    query: 'SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {table:String}',
    query_params: { table: AUDIT_TABLE },
    format: 'JSONEachRow',
  })).json<{ name: string }>();
  const names = columns.map((c) => c.name);
  for (const query of [...auditTableMigrations(tables[0]?.engine_full ?? '', retentionDays, names), ...auditServerColumnMigrations(names)]) {
    // An ALTER ... MODIFY TTL runs as a background mutation; open does not wait for it.
    await client.command({ query });
  }
}

/** A seal meets [since, until) when its first entry is before until and its last at or after since. */
function sealWindow(orgId: string, window?: { since: Date; until: Date }): { where: string; params: QueryParams } {
  const params: QueryParams = { org: orgId };
  let where = 'org_id = {org:UUID}';
  if (window !== undefined) {
    where += " AND first_at < {until:DateTime64(3, 'UTC')} AND last_at >= {since:DateTime64(3, 'UTC')}";
    params.since = toChDateTime(window.since);
    params.until = toChDateTime(window.until);
  }
  return { where, params };
}

/** A verify group as the server returns it (JSONEachRow; tuples as arrays). */
interface VerifyGroupRow {
  batch_id: string;
  n: number | string;
  in_window: number | string;
  first_at: string;
  first_id: string;
  last_at: string;
  last_id: string;
  leaves: string[];
  legacy_in_window: number | string;
  late_unhashed: [string, string];
  late_unhashed_n: number | string;
  mismatched: string[];
  recent_in_window: number | string;
  old_in_window: [string, string];
  old_in_window_n: number | string;
}

/**
 * The most batches a verify page holds: each comes back as a row of ~15 fields,
 * ~5 µs to parse and map. An org whose calls come one a batch has as many
 * batches as entries, and a page of 50,000 held the event loop ~0.6 s.
 */
const VERIFY_PAGE_BATCHES = 5000;
const IN_WINDOW = "timestamp >= {ws:DateTime64(3, 'UTC')} AND timestamp < {wu:DateTime64(3, 'UTC')}";
/** Dated after the org was created and before sealing began: an entry there may have been written without a hash or a batch. */
const IN_LEGACY = "(timestamp >= {legacyFrom:DateTime64(3, 'UTC')} AND timestamp < {legacy:DateTime64(3, 'UTC')})";
const LEGACY_ROW = `(batch_id = '' AND ${IN_LEGACY})`;
/** Written (written_at, the store's insert time: a long call's timestamp is when it began) within the sealing grace, and not past the verifier's clock. */
const RECENT = "written_at >= {grace:DateTime64(3, 'UTC')} AND written_at < {graceUntil:DateTime64(3, 'UTC')}";
/**
 * A hashed entry in the window that should be sealed by now: written before the
 * grace, or with a written_at past the verifier's clock (set by hand: the
 * column is not hashed), but not one written without a batch before sealing
 * began (legacy).
 */
const OLD_UNSEALED = `entry_hash != '' AND ${IN_WINDOW} AND NOT (${RECENT}) AND NOT ${LEGACY_ROW}`;


function entryRef([at, id]: [string, string]): EntryRef {
  return { id, timestamp: isoFromCh(at) };
}

/** The audit seals (seal.ts), beside the audit table. */
export const SEALS_TABLE = 'audit_seals';
const SEAL_COLUMN_NAMES = SEAL_COLUMNS.map(([name]) => name);
const SEALS_SHAPE = tableShape(SEALS_TABLE, SEAL_COLUMNS.map(([name, type]) => [name, type] as const));

/**
 * One row per seal, kept without a TTL (a few hundred bytes per batch and org),
 * so a chain stays whole after the entries it sealed expire. The same dedup
 * window and fsync settings as the audit table: a seal is written under its
 * batch's token, with the same durability.
 */
const SEALS_TABLE_DDL = `CREATE TABLE IF NOT EXISTS ${SEALS_TABLE}
(
${SEAL_COLUMNS.map(([name, type]) => `    ${name} ${type}`).join(',\n')}
)
ENGINE = MergeTree
ORDER BY (org_id, writer, seq)
SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1`;

/** The live audit stream's window: some orgs' rows inserted at or after an instant of the store's clock. */
/**
 * Bounded by timestamp too (a day before the cursor: the table's key, and no
 * call lasts a day): parts of a table made before written_at that are not yet
 * materialized read written_at as now() and would otherwise stream the org's
 * whole history as new, again on every poll.
 */
/** The live stream's rows: written at or after `since`, dated at most a day before `floor` (the table's order; WRITTEN_DATED_WITHIN_MS). */
const WRITTEN_WINDOW = "org_id IN {orgs:Array(UUID)} AND written_at >= fromUnixTimestamp64Milli(toInt64({since:UInt64}), 'UTC') AND timestamp >= fromUnixTimestamp64Milli(toInt64({floor:UInt64}), 'UTC') - INTERVAL 1 DAY";

/** Policy replay reads the agent's proxied calls in a half-open window. */
const REPLAY_WINDOW =
  "org_id = {org:UUID} AND agent_id = {agentId:UUID} AND source = 'proxy' AND timestamp >= {since:DateTime64(3, 'UTC')} AND timestamp < {until:DateTime64(3, 'UTC')}";
/** The policy path, or for rows written before it was recorded, the raw path of the URL (normalised by the service). */
const REPLAY_PATH = "if(policy_path != '', policy_path, if(path(tool_url) = '', '/', path(tool_url)))";
/**
 * Bytes of groups (their names, paths and REPLAY_GROUP_BYTES's fields) a replay
 * reads per query, about: more are read in parts (replayGroups), each one more
 * scan of the window...
 */
const REPLAY_BYTES_PER_PART = 8 * 1024 * 1024;
/** ...and groups, which the bytes bound first but for the shortest (40,000 of ~210 bytes). */
const REPLAY_GROUPS_PER_PART = 40_000;
/** What splits a window's groups into parts: every call of a group has the same. */
const REPLAY_GROUP_HASH = `cityHash64(tool_name, action, ${REPLAY_PATH}, mcp_method, mcp_tool)`;
/** What a group weighs as #replayGroupsPart reads it: its strings, and ~200 bytes of field names, numbers and its key. */
const REPLAY_GROUP_BYTES = `length(tool_name) + length(action) + length(${REPLAY_PATH}) + length(mcp_method) + length(mcp_tool) + 200`;
/** A group's key for its samples (ReplayGroup.key). */
const REPLAY_SAMPLE_KEY = `cityHash64(tool_name, action, ${REPLAY_PATH}, mcp_method, mcp_tool, toString(decision))`;

function replayParams(orgId: string, agentId: string, since: Date, until: Date): QueryParams {
  return { org: orgId, agentId, since: toChDateTime(since), until: toChDateTime(until) };
}

function truthyValue(v: unknown): boolean {
  return v === true || v === 1 || v === '1' || v === 'true';
}


function listWhere(orgId: string, filter: AuditFilter): { where: string; params: QueryParams } {
  const clauses = ['org_id = {org:UUID}'];
  const params: QueryParams = { org: orgId };
  if (filter.agentId !== undefined) {
    clauses.push('agent_id = {agentId:UUID}');
    params.agentId = filter.agentId;
  }
  if (filter.decision !== undefined) {
    if (filter.decision !== 'allowed' && filter.decision !== 'denied') {
      throw new RangeError(`decision must be allowed or denied, not ${JSON.stringify(filter.decision)}`);
    }
    clauses.push('decision = {decision:String}');
    params.decision = filter.decision;
  }
  for (const [field, column] of AUDIT_EXACT_FILTERS) {
    const value = filter[field];
    if (value !== undefined) {
      clauses.push(`${column} = {${field}:String}`);
      params[field] = value;
    }
  }
  // A half-open window [since, until): consecutive windows never share a row.
  if (filter.since !== undefined) {
    clauses.push("timestamp >= {since:DateTime64(3, 'UTC')}");
    params.since = toChDateTime(parseInstant(filter.since, 'since'));
  }
  if (filter.until !== undefined) {
    clauses.push("timestamp < {until:DateTime64(3, 'UTC')}");
    params.until = toChDateTime(parseInstant(filter.until, 'until'));
  }
  return { where: clauses.join(' AND '), params };
}

/** An instant in ms since the epoch, as a query parameter (UInt64 in the SQL). */
function epochMs(ms: number): number {
  if (!Number.isSafeInteger(ms) || ms < 0) throw new RangeError('an instant must be whole milliseconds since the epoch');
  return ms;
}

function nonNegativeInt(n: number, field: string): number {
  if (!Number.isSafeInteger(n) || n < 0 || n > 0xffffffff) throw new RangeError(`${field} must be a whole number from 0 to 2^32-1`);
  return n;
}

/** A ClickHouse string literal: backslashes and quotes escaped. */
function sqlString(value: string): string {
  return `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;
}

/** Settings as a SETTINGS clause's list; values are numbers or string literals. */
function settingsSql(settings: Record<string, string | number>): string {
  return Object.entries(settings).map(([name, value]) => `${name} = ${typeof value === 'number' ? value : sqlString(value)}`).join(', ');
}

const BACKTICK = '\x60';

/** A ClickHouse identifier in backticks, with backslashes and backticks escaped. */
function quoteIdentifier(name: string): string {
  return BACKTICK + name.replaceAll('\\', '\\\\').replaceAll(BACKTICK, '\\' + BACKTICK) + BACKTICK;
}

// A real audit store that fails on demand, for the batcher and spool tests: the
// ClickHouse store over the ClickHouse HTTP stand-in, in this process. `down()`
// pauses the stand-in, so the store's inserts fail as they would with the server
// gone (the client sees 503s and closed connections); `loseNextAcknowledgement()`
// lets the next insert land and then throws, as when the answer to a written
// batch is lost. Every insert attempt is recorded with its token. One per test
// file: a process can open one chDB data directory.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AuditStore } from '../../shared/stores/audit-store.js';
import { ClickHouseAuditStore } from '../../shared/stores/clickhouse/clickhouse-audit-store.js';
import { countEncodedRows } from '../../shared/audit/audit-codec.js';
import { startClickHouseHttpServer } from './clickhouse-http-server.js';
import { eventually } from './eventually.js';

export interface InsertAttempt {
  token: string;
  rows: number;
}

export interface AuditStoreOnDemand {
  /** The store to hand to the code under test. */
  store: AuditStore;
  /** The stand-in's URL, for a test's own SQL (a table setting, say). */
  url: string;
  /** Every insertEncoded call, in order, whether it succeeded or not. */
  attempts: InsertAttempt[];
  down(): void;
  up(): void;
  loseNextAcknowledgement(): void;
  /** The next insert writes nothing and fails after `ms`, as with a server that hangs, then drops the connection. */
  failNextInsertAfter(ms: number): void;
  /** Every insert until up() writes nothing and fails after `ms`: a server that hangs (the HTTP client's timeout ends each). */
  hang(ms: number): void;
  /** The next insert lands after `ms`, as with a slow server. */
  delayNextInsert(ms: number): void;
  /** Waits until the org holds `n` rows. */
  rowsLanded(orgId: string, n: number, ms?: number): Promise<true>;
  close(): Promise<void>;
}

/** The insert was written, but its caller never learns it. */
export class AcknowledgementLost extends Error {
  readonly code = 'ECONNRESET';
  constructor() {
    super('the audit store closed the connection before answering');
  }
}

export async function openAuditStoreOnDemand(): Promise<AuditStoreOnDemand> {
  const dataDir = mkdtempSync(join(tmpdir(), 'tcg-audit-store-'));
  const server = await startClickHouseHttpServer({ dataDir });
  const real = await ClickHouseAuditStore.open({ url: server.url, dataDir, retentionDays: 30 });
  const attempts: InsertAttempt[] = [];
  let loseAcknowledgement = false;
  let failAfterMs: number | null = null;
  let delayMs = 0;
  let hangMs: number | null = null;
  const store: AuditStore = {
    insert: (rows, token) => real.insert(rows, token),
    encode: (record, batchId) => real.encode(record, batchId),
    insertEncoded: async (body, token) => {
      const rows = typeof body === 'string' ? body : body.rows;
      attempts.push({ token, rows: countEncodedRows(typeof rows === 'string' ? rows : Buffer.concat(rows).toString('utf8')) });
      if (hangMs !== null) {
        await new Promise((resolve) => setTimeout(resolve, hangMs!));
        throw new AcknowledgementLost();
      }
      if (failAfterMs !== null) {
        const ms = failAfterMs;
        failAfterMs = null;
        await new Promise((resolve) => setTimeout(resolve, ms));
        throw new AcknowledgementLost();
      }
      if (delayMs > 0) {
        const ms = delayMs;
        delayMs = 0;
        await new Promise((resolve) => setTimeout(resolve, ms));
      }
      await real.insertEncoded(body, token);
      if (loseAcknowledgement) {
        loseAcknowledgement = false;
        throw new AcknowledgementLost();
      }
    },
    list: (orgId, filter, limit, offset) => real.list(orgId, filter, limit, offset),
    listInSlices: (orgId, filter, limit, offset, onRows) => real.listInSlices(orgId, filter, limit, offset, onRows),
    report: (orgId, since, until, maxEntries, topN) => real.report(orgId, since, until, maxEntries, topN),
    summary: (orgId, since, until, maxAgents) => real.summary(orgId, since, until, maxAgents),
    replayGroups: (orgId, agentId, since, until, onGroups) => real.replayGroups(orgId, agentId, since, until, onGroups),
    sealStored: (orgId, writer, seq, sealHash) => real.sealStored(orgId, writer, seq, sealHash),
    replaySamples: (orgId, agentId, since, until, keys, limit) => real.replaySamples(orgId, agentId, since, until, keys, limit),
    clockMs: () => real.clockMs(),
    writtenSince: (orgIds, sinceMs, floorMs) => real.writtenSince(orgIds, sinceMs, floorMs),
    writtenCounts: (orgIds, sinceMs) => real.writtenCounts(orgIds, sinceMs),
    writtenEntries: (orgIds, ids, sinceMs) => real.writtenEntries(orgIds, ids, sinceMs),
    count: (orgId) => real.count(orgId),
    listSeals: (orgId, window, limit, newestFirst) => real.listSeals(orgId, window, limit, newestFirst),
    countSeals: (orgId, window) => real.countSeals(orgId, window),
    sealChains: (orgId, window) => real.sealChains(orgId, window),
    firstSealGap: (orgId, writer, afterSeq) => real.firstSealGap(orgId, writer, afterSeq),
    sealRange: (orgId, writer, fromSeq, toSeq, limit) => real.sealRange(orgId, writer, fromSeq, toSeq, limit),
    sealsOfBatches: (orgId, batchIds) => real.sealsOfBatches(orgId, batchIds),
    verifyGroups: (orgId, scan, onPage, pageRows) => real.verifyGroups(orgId, scan, onPage, pageRows),
    entriesByIds: (orgId, ids) => real.entriesByIds(orgId, ids),
    orgIds: () => real.orgIds(),
    ping: () => real.ping(),
    close: () => real.close(),
  };
  return {
    store,
    url: server.url,
    attempts,
    down: () => server.pause(),
    up: () => {
      hangMs = null;
      server.resume();
    },
    hang: (ms) => {
      hangMs = ms;
    },
    loseNextAcknowledgement: () => {
      loseAcknowledgement = true;
    },
    failNextInsertAfter: (ms) => {
      failAfterMs = ms;
    },
    delayNextInsert: (ms) => {
      delayMs = ms;
    },
    // A count may fail just after up() (the client's first try on a connection
    // the outage closed); the next poll tries again.
    rowsLanded: (orgId, n, ms = 10_000) =>
      eventually(async () => ((await real.count(orgId).catch(() => -1)) === n ? true : undefined), ms),
    close: async () => {
      server.resume();
      await real.close();
      await server.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

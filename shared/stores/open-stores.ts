// Opens the stores the config names: metadata in MongoDB (MONGODB_URL) or SQLite
// (DATA_DIR/metadata.sqlite), audit in a ClickHouse server (CLICKHOUSE_URL) or
// embedded chDB (DATA_DIR/chdb). Drivers not in use are never loaded (chDB alone
// costs ~200 MB of memory).
import { join } from 'node:path';
import type { Config } from '../config.js';
import { StoreUnavailableError } from '../errors.js';
import type { AuditStore } from './audit-store.js';
import { createMetadataStore, type MetadataStore } from './metadata-store.js';
import { encodeAuditRow } from '../audit/audit-codec.js';
import { ClickHouseAuditStore } from './clickhouse/clickhouse-audit-store.js';
import { SqliteMetadataDriver } from './sqlite/sqlite-metadata-driver.js';

export async function openMetadataStore(config: Readonly<Config>): Promise<MetadataStore> {
  if (config.mongodbUrl !== null) {
    const { MongoMetadataDriver } = await import('./mongo/mongo-metadata-driver.js');
    return createMetadataStore(await MongoMetadataDriver.open(config.mongodbUrl));
  }
  return createMetadataStore(SqliteMetadataDriver.open(join(config.dataDir, 'metadata.sqlite')));
}

export function openAuditStore(config: Readonly<Config>, existing = false): Promise<ClickHouseAuditStore> {
  return ClickHouseAuditStore.open({ url: config.clickhouseUrl, dataDir: config.dataDir, retentionDays: config.auditRetentionDays, threadNice: config.chdbThreadNice, existing });
}

/**
 * A ClickHouse server that is down when a process starts must not keep the
 * process down: the audit pipeline spools until it answers. Until the store
 * has opened (ping and migration), every call tries to open it again, at most
 * once a second, and fails fast otherwise (inserts are then spooled; reads are
 * 503). The embedded engine is opened directly: it is part of the process.
 */
export async function openAuditStoreWhenReachable(config: Readonly<Config>, onWaiting: (err: unknown) => void, startupWaitMs = AUDIT_STARTUP_WAIT_MS): Promise<AuditStore> {
  if (config.clickhouseUrl === null) return openAuditStore(config);
  let store: AuditStore | null = null;
  let opening: Promise<AuditStore> | null = null;
  let closed = false;
  /** An open that succeeded: kept, or closed at once when the store was closed meanwhile. */
  const adopt = (opened: AuditStore): AuditStore => {
    if (closed) {
      void opened.close();
      throw new AuditStoreUnavailable();
    }
    return (store = opened);
  };
  // The first open, waited for at most startupWaitMs: a server that takes the
  // connection and never answers held the process's start for the client's
  // timeouts (30 s) while every call was refused. Past the wait the process
  // starts; the open goes on, and calls wait for it as for any open below.
  const first = openAuditStore(config);
  let timer: NodeJS.Timeout | undefined;
  const early = await Promise.race([
    first.then((opened) => opened, (err: unknown) => err as Error),
    new Promise<'waiting'>((resolve) => { timer = setTimeout(() => resolve('waiting'), startupWaitMs); }),
  ]);
  clearTimeout(timer);
  if (early instanceof ClickHouseAuditStore) return early;
  /** An open under way: calls wait for it; its failure is told once and is each waiting call's 503. */
  const track = (attempt: Promise<AuditStore>): Promise<AuditStore> => {
    const tracked = attempt.then(adopt, (err: unknown) => {
      onWaiting(err);
      throw new AuditStoreUnavailable();
    }).finally(() => {
      opening = null;
    });
    opening = tracked;
    return tracked;
  };
  if (early === 'waiting') {
    onWaiting(new StoreUnavailableError(`the ClickHouse server did not answer within ${startupWaitMs} ms of the start; still trying`));
    track(first).catch(() => undefined); // a call that waits on it sees the failure; none may
  } else {
    onWaiting(early);
  }
  let lastAttempt = Date.now();
  const ready = (): Promise<AuditStore> => {
    if (closed) return Promise.reject(new AuditStoreUnavailable());
    if (store !== null) return Promise.resolve(store);
    if (opening !== null) return opening;
    if (Date.now() - lastAttempt < 1000) return Promise.reject(new AuditStoreUnavailable());
    lastAttempt = Date.now();
    return track(openAuditStore(config));
  };
  return {
    insert: async (rows, token) => (await ready()).insert(rows, token),
    encode: encodeAuditRow,
    insertEncoded: async (body, token) => (await ready()).insertEncoded(body, token),
    list: async (orgId, filter, limit, offset) => (await ready()).list(orgId, filter, limit, offset),
    listInSlices: async (orgId, filter, limit, offset, onRows) => (await ready()).listInSlices(orgId, filter, limit, offset, onRows),
    report: async (orgId, since, until, maxEntries, topN) => (await ready()).report(orgId, since, until, maxEntries, topN),
    summary: async (orgId, since, until, maxAgents) => (await ready()).summary(orgId, since, until, maxAgents),
    replayGroups: async (orgId, agentId, since, until, onGroups) => (await ready()).replayGroups(orgId, agentId, since, until, onGroups),
    sealStored: async (orgId, writer, seq, sealHash) => (await ready()).sealStored(orgId, writer, seq, sealHash),
    replaySamples: async (orgId, agentId, since, until, keys, limit) => (await ready()).replaySamples(orgId, agentId, since, until, keys, limit),
    clockMs: async () => (await ready()).clockMs(),
    writtenSince: async (orgIds, sinceMs, floorMs) => (await ready()).writtenSince(orgIds, sinceMs, floorMs),
    writtenCounts: async (orgIds, sinceMs) => (await ready()).writtenCounts(orgIds, sinceMs),
    writtenEntries: async (orgIds, ids, sinceMs) => (await ready()).writtenEntries(orgIds, ids, sinceMs),
    count: async (orgId) => (await ready()).count(orgId),
    listSeals: async (orgId, window, limit, newestFirst) => (await ready()).listSeals(orgId, window, limit, newestFirst),
    countSeals: async (orgId, window) => (await ready()).countSeals(orgId, window),
    sealChains: async (orgId, window) => (await ready()).sealChains(orgId, window),
    firstSealGap: async (orgId, writer, afterSeq) => (await ready()).firstSealGap(orgId, writer, afterSeq),
    sealRange: async (orgId, writer, fromSeq, toSeq, limit) => (await ready()).sealRange(orgId, writer, fromSeq, toSeq, limit),
    sealsOfBatches: async (orgId, batchIds) => (await ready()).sealsOfBatches(orgId, batchIds),
    verifyGroups: async (orgId, scan, onPage, pageRows) => (await ready()).verifyGroups(orgId, scan, onPage, pageRows),
    entriesByIds: async (orgId, ids) => (await ready()).entriesByIds(orgId, ids),
    orgIds: async () => (await ready()).orgIds(),
    // Not open yet: unavailable at once (GET /ready answers 503, not after the open's
    // timeouts), and an open is started or waited for behind it.
    ping: async () => {
      if (store !== null) return store.ping();
      ready().catch(() => undefined);
      throw new AuditStoreUnavailable();
    },
    close: async () => {
      closed = true;
      await store?.close();
    },
  };
}

/** How long a process's start waits for a ClickHouse server before it goes on without it (spooling). */
export const AUDIT_STARTUP_WAIT_MS = 3000;

/** The audit store has not answered yet (a 503 for readers, a spooled batch for writers). */
class AuditStoreUnavailable extends StoreUnavailableError {
  constructor() {
    super('the audit store cannot be reached yet');
  }
}

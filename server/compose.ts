// Composition: one process of the service wired for its role:
//   all-in-one  `npm start`: proxy, admin API and embedded stores in one process;
//   proxy       `npm run start:proxy`: the public entry point of split mode (any number);
//   admin       `npm run start:admin`: the admin API of split mode (one).
// Tests and the bench start it in-process through `startService`; the entry
// points (main*.ts) through `runMain` (lifecycle.ts).
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { AuditBatcher } from '../shared/audit/audit-batcher.js';
import { AuditSpool } from '../shared/audit/audit-spool.js';
import type { Config } from '../shared/config.js';
import { createLogger, type Logger } from '../shared/log.js';
import { Metrics, NO_APPROVALS } from '../shared/metrics.js';
import { checkSecretKey, loadAuditSigningKey, loadSecrets } from '../shared/secrets.js';
import { recoverJournal } from '../shared/audit/journal-recovery.js';
import { Sealer, sealHeadsOf } from '../shared/audit/seal.js';
import type { AuditStore } from '../shared/stores/audit-store.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import { openAuditStoreWhenReachable, openMetadataStore } from '../shared/stores/open-stores.js';
import type { ProxyPipeline } from '../proxy/pipeline.js';
import { listen, loadUws } from './listener.js';
import { stopInOrder } from './lifecycle.js';
import { startProblems, type Role } from './roles.js';

export type { Role } from './roles.js';

export interface RunningService {
  role: Role;
  port: number;
  url: string;
  /** The origin proxy_url is built from. */
  publicUrl: string;
  log: Logger;
  store: MetadataStore;
  auditStore: AuditStore;
  auditBatcher: AuditBatcher;
  pipeline: ProxyPipeline | null;
  metrics: Metrics;
  /** Stops accepting, drains in-flight calls up to `drainMs`, flushes (or spools) the audit, closes the stores. Idempotent. */
  stop(drainMs?: number): Promise<void>;
}

export const AUDIT_FLUSH_DEADLINE_MS = 10_000;

/** A store's ping that has not answered in this long fails GET /ready: probes time out at 1 to 5 s, and the ClickHouse client waits 10 s. */
export const READY_PING_WAIT_MS = 2000;

function withinReadyWait(ping: Promise<void>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('no answer in time')), READY_PING_WAIT_MS);
  });
  ping.catch(() => undefined); // a ping rejecting after the wait is not unhandled
  return Promise.race([ping, late]).finally(() => clearTimeout(timer));
}

/** docs/openapi.json from the package root (the source tree or above dist/). */
function readOpenApi(): string | null {
  for (const up of ['../docs/openapi.json', '../../docs/openapi.json']) {
    const file = new URL(up, import.meta.url);
    if (existsSync(file)) return readFileSync(file, 'utf8');
  }
  return null;
}

/** What split mode needs that all-in-one can generate or embed. Empty when the config will do. */
export async function startService(config: Readonly<Config>, log: Logger = createLogger(config.logLevel), role: Role = 'all-in-one'): Promise<RunningService> {
  const problems = startProblems(config, role);
  if (problems.length > 0) throw new Error(`cannot start the ${role} process:\n  ${problems.join('\n  ')}`);
  const uws = loadUws();
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const secrets = loadSecrets(config, { allowGenerate: role === 'all-in-one' });
  const signingKey = loadAuditSigningKey(config, { allowGenerate: role === 'all-in-one' });
  const sealer = new Sealer(signingKey);
  const store = await openMetadataStore(config);
  checkSecretKey(secrets.encryptionKey, await store.anyCredential());
  const auditStore = await openAuditStoreWhenReachable(config, (err) =>
    log.warn('ClickHouse cannot be reached; audit batches are spooled until it answers', { err }));
  const spool = AuditSpool.open(config.spoolDir!, config.spoolMaxBytes);
  const journal = await recoverJournal(spool, join(config.spoolDir!, 'journal'), sealer, log);
  const metrics = new Metrics({ agentLabel: config.metricsAgentLabel });
  const auditBatcher = new AuditBatcher(auditStore, {
    maxRows: config.auditBatchRows,
    maxDelayMs: config.auditBatchMs,
    minIntervalMs: config.auditBatchIntervalMs,
    // A quarter of the queue's byte bound, at most 32 MiB (a string V8 joins easily).
    maxBatchBytes: Math.min(32 * 1024 * 1024, Math.floor(config.auditQueueMaxBytes / 4)),
    maxQueued: config.auditQueueMax,
    maxQueuedBytes: config.auditQueueMaxBytes,
    spool,
    journal,
    sealer,
    onError: (err, rows, stage) => {
      const next = { encode: 'the record is dropped', seal: 'its rows are written unsealed', journal: 'its records are still batched, but a kill before their batch is written would lose them', insert: 'spooling it for replay', spool: 'keeping it in memory and retrying', replay: 'retrying later', unreadable: `the spooled batch is moved to ${join(config.spoolDir!, 'unreadable')} for an operator; the replay goes on`, closed: 'a record came after the audit was flushed at shutdown (a call answered while its agent was being looked up) and is lost' }[stage];
      log.error(`audit ${stage} failed; ${next}`, { rows, err });
    },
    onBatchWritten: (rows, ms) => {
      metrics.batchRows.observe(rows);
      metrics.flushSeconds.observe(ms / 1000);
    },
    // The seals landed: their chains' heads are recorded outside ClickHouse, so a
    // chain cut short there shows. A head not recorded (store down) only weakens
    // that check until the next batch moves it on.
    onBodyWritten: (body) => {
      const heads = sealHeadsOf(body);
      if (heads.length > 0) void store.recordSealHeads(heads).catch((err: unknown) => log.warn('audit chain heads could not be recorded', { err }));
    },
  });
  if (spool.batches.length > 0) log.warn('replaying audit batches left in the spool', { batches: spool.batches.length });

  let publicUrl = config.publicUrl ?? '';
  // Each wing is loaded only by the roles that run it: a split proxy carries no
  // admin code (~3 MiB of RSS: PDF, passwords, tokens, YAML) and an admin no proxy.
  const admin = role === 'proxy' ? null : (await import('../admin/app.js')).createAdminApp({ config, publicUrl: () => publicUrl, secrets, signingKey, store, auditStore, auditBatcher, metrics }, log);
  const passThrough = role === 'proxy' ? (await import('./admin-pass-through.js')).createAdminPassThrough(config.adminUrl!) : null;
  const pipeline = role === 'admin' ? null : (await import('../proxy/pipeline.js')).createProxyPipeline({
    config,
    store,
    encryptionKey: secrets.encryptionKey,
    batcher: auditBatcher,
    log,
    metrics,
    // One all-in-one process on SQLite is the only proxy: its counts are the whole count.
    shareRateLimits: role === 'proxy' || config.mongodbUrl !== null,
    publicUrl: () => publicUrl,
  });
  metrics.setSources({
    auditStats: () => ({ ...auditBatcher.stats, pending: auditBatcher.pending, spooledBatches: auditBatcher.spooledBatches }),
    inFlight: () => pipeline?.inFlight ?? 0,
    rateLimits: () => pipeline?.rateLimits() ?? { counters: 0, storeReachable: 1, syncFailures: 0, proxies: 1 },
    approvals: () => pipeline?.approvals() ?? NO_APPROVALS,
  });
  // A proxy shares its store with other processes (split mode, or all-in-ones on one MongoDB).
  if (pipeline !== null && (role === 'proxy' || config.mongodbUrl !== null)) {
    // The caches and held calls subscribe to store.changes; following adds other processes' commits.
    await store.changes.follow({
      pollMs: config.changePollMs,
      onError: (err) => log.warn('metadata change feed unavailable; caches rely on their TTL until it answers', { err }),
    });
  }

  const listener = await listen(uws, {
    host: config.host,
    port: config.port,
    pipeline,
    admin: passThrough !== null ? passThrough.handle : admin!.handle,
    trustForwardedFor: role === 'admin',
    exclusivePort: role !== 'proxy',
    closing: () => stopping,
    health: () => ({
      role,
      proxied_total: pipeline?.audited ?? 0,
      audit_written_total: auditBatcher.stats.written,
      audit_pending: auditBatcher.pending,
      audit_spooled_batches: auditBatcher.spooledBatches,
    }),
    ready: async () => {
      // A load balancer's probe on a kept-alive connection still reaches a draining process: it takes no more work.
      if (stopping) return 'the process is shutting down';
      if (auditBatcher.saturated) return 'the audit pipeline is refusing work';
      const [metadata, audit] = await Promise.allSettled([withinReadyWait(store.ping()), withinReadyWait(auditStore.ping())]);
      if (metadata.status === 'rejected') return 'the metadata store does not answer';
      if (audit.status === 'rejected') return 'the audit store does not answer';
      return null;
    },
    metrics: config.metricsEnabled ? { text: () => metrics.text(), contentType: metrics.contentType, token: config.metricsToken } : null,
    onError: (message, err) => log.error(message, { err }),
    openapi: readOpenApi(),
  });
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${listener.port}`;
  if (publicUrl === '') publicUrl = `http://localhost:${listener.port}`;

  let stopping = false;
  const stop = stopInOrder({
    beginRefusing: () => {
      pipeline?.stopAdmitting();
      stopping = true;
      listener.stop();
      // The change feed runs on through the drain: an agent deleted meanwhile
      // still has its calls in flight ended (agent-deletions.ts), and a revoked
      // credential still leaves the caches. It stops with the stores.
      // Live audit streams end now: they are not calls to drain, and a client reconnects elsewhere.
      admin?.endStreams();
      passThrough?.endStreams();
    },
    inFlight: () => pipeline?.inFlight ?? 0,
    endInFlight: () => pipeline?.endInFlight(),
    stopAnswering: () => listener.stopAnswering(),
    flushAudit: async () => {
      const unwritten = await auditBatcher.close(AUDIT_FLUSH_DEADLINE_MS);
      if (unwritten > 0) log.error('audit records could be neither written nor spooled before shutdown', { unwritten });
    },
    close: [() => void store.changes.stop(), () => pipeline?.close(), () => passThrough?.close(), () => admin?.close(), () => auditStore.close(), () => store.close()],
  });

  return { role, port: listener.port, url, publicUrl, log, store, auditStore, auditBatcher, pipeline, metrics, stop };
}

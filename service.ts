// The all-in-one service: one process, embedded stores (SQLite, chDB) unless
// MONGODB_URL / CLICKHOUSE_URL say otherwise, the public listener serving the
// proxy, /health and the admin API. Tests and the bench start it in-process.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { createAdminApp } from './admin/app.js';
import { AuditBatcher } from './shared/audit/audit-batcher.js';
import type { Config } from './shared/config.js';
import { createLogger, type Logger } from './shared/log.js';
import { loadSecrets } from './shared/secrets.js';
import { ClickHouseAuditStore } from './shared/stores/clickhouse/clickhouse-audit-store.js';
import type { MetadataStore } from './shared/stores/metadata-store.js';
import { SqliteMetadataStore } from './shared/stores/sqlite/sqlite-metadata-store.js';
import { listen, loadUws } from './proxy/listen.js';
import { createProxyPipeline } from './proxy/pipeline.js';

export interface RunningService {
  port: number;
  url: string;
  log: Logger;
  store: MetadataStore;
  auditStore: ClickHouseAuditStore;
  auditBatcher: AuditBatcher;
  /** Stops accepting, drains in-flight calls up to `drainMs`, flushes the audit, closes the stores. Idempotent. */
  stop(drainMs?: number): Promise<void>;
}

export const AUDIT_FLUSH_DEADLINE_MS = 10_000;

export async function startService(config: Readonly<Config>, log: Logger = createLogger(config.logLevel)): Promise<RunningService> {
  if (config.mongodbUrl !== null) throw new Error('MONGODB_URL: the MongoDB metadata store is not available yet; unset it to use SQLite');
  const uws = loadUws();
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const secrets = loadSecrets(config, { allowGenerate: true });
  const store = SqliteMetadataStore.open(join(config.dataDir, 'metadata.sqlite'));
  const auditStore = await ClickHouseAuditStore.open({
    url: config.clickhouseUrl,
    dataDir: config.dataDir,
    retentionDays: config.auditRetentionDays,
  });
  const auditBatcher = new AuditBatcher(auditStore, {
    maxRows: config.auditBatchRows,
    maxDelayMs: config.auditBatchMs,
    maxQueued: config.auditQueueMax,
    onError: (err, rows) => log.error('audit batch not written; retrying', { rows, err }),
  });
  const admin = createAdminApp({ config, secrets, store, auditStore, auditBatcher }, log);
  const pipeline = createProxyPipeline({ config, store, encryptionKey: secrets.encryptionKey, batcher: auditBatcher, log });
  const listener = await listen(uws, {
    host: config.host,
    port: config.port,
    pipeline,
    admin: (req) => admin.handle(req),
    health: () => ({ audit_pending: auditBatcher.pending }),
  });
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${listener.port}`;

  let stopping: Promise<void> | null = null;
  async function stop(drainMs = 10_000): Promise<void> {
    stopping ??= (async () => {
      listener.stop();
      const deadline = Date.now() + drainMs;
      while (pipeline.inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      const unwritten = await auditBatcher.close(AUDIT_FLUSH_DEADLINE_MS);
      if (unwritten > 0) log.error('audit records could not be written before shutdown', { unwritten });
      await pipeline.close();
      await auditStore.close();
      await store.close();
    })();
    return stopping;
  }

  return { port: listener.port, url, log, store, auditStore, auditBatcher, stop };
}

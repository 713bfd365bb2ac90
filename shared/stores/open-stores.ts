// Opens the stores the config names: metadata in MongoDB (MONGODB_URL) or SQLite
// (DATA_DIR/metadata.sqlite), audit in a ClickHouse server (CLICKHOUSE_URL) or
// embedded chDB (DATA_DIR/chdb). Drivers not in use are never loaded (chDB alone
// costs ~200 MB of memory).
import { join } from 'node:path';
import type { Config } from '../config.js';
import type { ChangeLog } from './change-poller.js';
import type { MetadataStore } from './metadata-store.js';
import { ClickHouseAuditStore } from './clickhouse/clickhouse-audit-store.js';
import { SqliteMetadataStore } from './sqlite/sqlite-metadata-store.js';

export type MetadataStoreWithLog = MetadataStore & ChangeLog;

export async function openMetadataStore(config: Readonly<Config>): Promise<MetadataStoreWithLog> {
  if (config.mongodbUrl !== null) {
    const { MongoMetadataStore } = await import('./mongo/mongo-metadata-store.js');
    return MongoMetadataStore.open(config.mongodbUrl);
  }
  return SqliteMetadataStore.open(join(config.dataDir, 'metadata.sqlite'));
}

export function openAuditStore(config: Readonly<Config>): Promise<ClickHouseAuditStore> {
  return ClickHouseAuditStore.open({ url: config.clickhouseUrl, dataDir: config.dataDir, retentionDays: config.auditRetentionDays });
}

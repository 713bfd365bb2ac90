// The environment of a split-mode process for lifecycle tests: a ClickHouse
// HTTP server (over chDB, in its own process, stopped at the test's end) and the
// secrets every process of the deployment shares.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Test } from 'tap';
import { spawnClickHouseHttpServer } from './clickhouse-http-server.js';

/** `base` plus what admin and proxy processes share; their data (SQLite, ClickHouse) under `dir`. */
export async function splitModeEnv(t: Test, dir: string, base: Record<string, string>): Promise<Record<string, string>> {
  const clickhouse = await spawnClickHouseHttpServer({ dataDir: join(dir, 'clickhouse') });
  t.teardown(() => clickhouse.kill('SIGTERM'));
  return {
    ...base,
    JWT_SECRET: randomBytes(32).toString('base64url'),
    SECRET_KEY: randomBytes(32).toString('hex'),
    AUDIT_SIGNING_KEY: generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    CLICKHOUSE_URL: `${clickhouse.url}/audit`,
    DATA_DIR: join(dir, 'split'),
  };
}

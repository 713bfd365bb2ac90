// Split mode for lifecycle tests: the environment of a split-mode process (a
// ClickHouse HTTP server over chDB, in its own process, stopped at the test's
// end, and the secrets every process of the deployment shares), and a whole
// deployment with its admin process.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Test } from 'tap';
import { spawnClickHouseHttpServer, type SpawnedClickHouseHttpServer } from './clickhouse-http-server.js';
import { spawnService, type SpawnedService } from './spawn-service.js';

/** The secrets every process of one deployment shares. */
function sharedSecrets(): Record<string, string> {
  return {
    JWT_SECRET: randomBytes(32).toString('base64url'),
    SECRET_KEY: randomBytes(32).toString('hex'),
    AUDIT_SIGNING_KEY: generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

/** `base` plus what admin and proxy processes share; their data (SQLite, ClickHouse) under `dir`. */
export async function splitModeEnv(t: Test, dir: string, base: Record<string, string>): Promise<Record<string, string>> {
  const clickhouse = await spawnClickHouseHttpServer({ dataDir: join(dir, 'clickhouse') });
  t.teardown(() => clickhouse.kill('SIGTERM'));
  return {
    ...base,
    ...sharedSecrets(),
    CLICKHOUSE_URL: `${clickhouse.url}/audit`,
    DATA_DIR: join(dir, 'split'),
  };
}

/**
 * A split deployment for end-to-end tests under `root`: a ClickHouse HTTP server
 * that fault tests may stop and start again (same port, same data), one admin
 * process, and the environment of proxy processes (each with its own spool).
 */
export interface SplitDeployment {
  /** The environment every process of the deployment shares. */
  common: Record<string, string>;
  admin: SpawnedService;
  proxyEnv(name: string): Record<string, string>;
  /** SIGTERM to the ClickHouse server; resolves once it is gone. */
  stopClickHouse(): Promise<void>;
  /** A new ClickHouse server on the same port and data. */
  startClickHouse(): Promise<void>;
  /** SIGSTOP: the server's socket still takes connections and answers nothing; SIGCONT: it goes on. */
  pauseClickHouse(paused: boolean): void;
  /** Stops the admin process and ClickHouse (proxies are the test's). */
  close(): Promise<void>;
}

export async function startSplitDeployment(root: string, base: Record<string, string>): Promise<SplitDeployment> {
  const dataDir = join(root, 'clickhouse');
  let clickhouse: SpawnedClickHouseHttpServer = await spawnClickHouseHttpServer({ dataDir });
  const port = clickhouse.port;
  const common = {
    // Batches as the tests' in-process service has them (test/support/service.ts):
    // a test that sets AUDIT_BATCH_MS means its rows to land that soon.
    AUDIT_BATCH_INTERVAL_MS: '20',
    ...base,
    ...sharedSecrets(),
    CLICKHOUSE_URL: `${clickhouse.url}/audit`,
    DATA_DIR: join(root, 'shared'),
  };
  const admin = await spawnService('admin', { ...common, SPOOL_DIR: join(root, 'spool-admin') });
  return {
    common,
    admin,
    proxyEnv: (name) => ({ ...common, ADMIN_URL: admin.url, SPOOL_DIR: join(root, `spool-${name}`) }),
    stopClickHouse: () => clickhouse.kill('SIGTERM'),
    async startClickHouse() {
      clickhouse = await spawnClickHouseHttpServer({ dataDir, port });
    },
    pauseClickHouse(paused) {
      clickhouse.child.kill(paused ? 'SIGSTOP' : 'SIGCONT');
    },
    async close() {
      await admin.stop();
      await clickhouse.kill('SIGTERM');
    },
  };
}

// The guard in split mode: a proxy process (the comparator, whose CPU and memory
// are reported), the admin process it passes admin paths to, and a ClickHouse
// server over HTTP in a process of its own (the test support's ClickHouse HTTP
// interface over chDB), sharing one SQLite file. The proxy has no chDB in it, as
// in production: issue 12 asks that it be at least as fast as all-in-one.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { CA_FILE, serviceScript } from '../paths.js';
import { startProcess } from '../processes.js';
import { PROXY_ENV, PROXY_NODE_FLAGS } from '../../server/node-flags.js';
import type { Target } from '../target.js';
import { GuardOrg } from './guard.js';

export async function startGuardSplit(tmpDir: string, upstreamAuthority: string, bearer: string): Promise<Target> {
  const dir = mkdtempSync(join(tmpDir, 'guard-split-'));
  const clickhouse = await startProcess({
    name: 'clickhouse-http',
    command: process.execPath,
    args: [...serviceScript('test/support/clickhouse-http-server-main'), '--data-dir', join(dir, 'clickhouse')],
    env: { ...process.env },
    ready: /listening (http:\/\/\S+)/,
    readyTimeoutMs: 60_000,
  });
  const common = {
    ...process.env,
    PORT: '0',
    HOST: '127.0.0.1',
    DATA_DIR: join(dir, 'shared'),
    JWT_SECRET: randomBytes(32).toString('base64url'),
    SECRET_KEY: randomBytes(32).toString('hex'),
    AUDIT_SIGNING_KEY: generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    CLICKHOUSE_URL: `${clickhouse.match[1]}/audit`,
    GUARD_ALLOW_TARGETS: '127.0.0.1',
    NODE_EXTRA_CA_CERTS: CA_FILE,
    LOG_LEVEL: 'warn',
  };
  const admin = await startProcess({
    name: 'guard-split-admin',
    command: process.execPath,
    args: serviceScript('server/main-admin'),
    env: { ...common, SPOOL_DIR: join(dir, 'spool-admin') },
    ready: /listening on (http:\/\/127\.0\.0\.1:\d+)/,
    readyTimeoutMs: 60_000,
  });
  const { proc, match } = await startProcess({
    name: 'guard-split',
    command: process.execPath,
    args: [...PROXY_NODE_FLAGS, ...serviceScript('server/main-proxy')], // as npm run start:proxy starts it
    env: { ...common, ...PROXY_ENV, ADMIN_URL: admin.match[1]!, SPOOL_DIR: join(dir, 'spool-proxy') },
    ready: /listening on http:\/\/127\.0\.0\.1:(\d+)/,
    readyTimeoutMs: 60_000,
  });
  const origin = `http://127.0.0.1:${match[1]}`;
  // Its own org, agent, credential and policy, as for the all-in-one guard (log_outputs none, the bench policy).
  const { agent } = await GuardOrg.withBenchAgent(origin, 'split', upstreamAuthority, bearer, 'bench-split', 'none');
  return {
    name: 'guard-split',
    origin,
    pathFor: (upstreamPath) => `/proxy/${agent.apiKey}/${upstreamAuthority}${upstreamPath}`,
    proc,
  };
}

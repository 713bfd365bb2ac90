// Starts the real all-in-one service in this test process on a free loopback
// port with a fresh data directory, and talks HTTP to it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { JWT_AUDIENCE, JWT_ISSUER } from '../../admin/auth.js';
import { loadConfig } from '../../shared/config.js';
import { createLogger, type Logger } from '../../shared/log.js';
import { startService, type RunningService } from '../../server/compose.js';

export { eventually } from './eventually.js';

export const TLS_DIR = new URL('../fixtures/tls/', import.meta.url).pathname;

export interface TestService extends RunningService {
  dataDir: string;
  logs: string[];
  /** Stops the service and removes its data directory. */
  close(): Promise<void>;
}

export async function startTestService(env: Record<string, string> = {}): Promise<TestService> {
  const dataDir = env.DATA_DIR ?? mkdtempSync(join(tmpdir(), 'tcg-test-'));
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    GUARD_ALLOW_TARGETS: '127.0.0.1',
    NODE_EXTRA_CA_CERTS: join(TLS_DIR, 'ca.crt'),
    // Tests read their calls' entries at once: batches close within 20 ms, under load too.
    AUDIT_BATCH_MS: '20',
    AUDIT_BATCH_INTERVAL_MS: '20',
    LOG_LEVEL: 'debug',
    // Tests sign up many organizations from 127.0.0.1; test/integration/auth-load.test.ts
    // checks the bound itself (and, in a process of the service, its default).
    SIGNUP_MAX_PER_ADDRESS: '1000000',
    ...env,
  });
  const logs: string[] = [];
  const log: Logger = createLogger(config.logLevel, (line) => {
    logs.push(line);
  });
  const service = await startService(config, log);
  return {
    ...service,
    dataDir,
    logs,
    async close() {
      await service.stop(2000);
      if (env.DATA_DIR === undefined) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface Session {
  token: string;
  auth: Record<string, string>;
}

let emailCounter = 0;

/** Signs a fresh user (and so a fresh org) up. */
export async function signup(base: string, email = `user${++emailCounter}-${Date.now()}@example.com`): Promise<Session & { email: string }> {
  const res = await fetch(`${base}/auth/signup`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password: 'correct horse battery' }),
  });
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { access_token: string };
  return { email, token: body.access_token, auth: { authorization: `Bearer ${body.access_token}` } };
}

/** Logs a user signed up by `signup` in again (e.g. on a restarted process). */
export async function login(base: string, email: string): Promise<Session> {
  const res = await api(base, null, 'POST', '/auth/login', { email, password: 'correct horse battery' });
  if (res.status !== 200) throw new Error(`login failed: ${res.status} ${res.text}`);
  return { token: res.json.access_token, auth: { authorization: `Bearer ${res.json.access_token}` } };
}

/** The agent's audit rows (X-Total-Count). */
export async function auditTotal(base: string, session: Session, agentId: string): Promise<number> {
  return Number((await api(base, session, 'GET', `/audit?agent_id=${agentId}&limit=1`)).headers.get('x-total-count') ?? -1);
}

export async function api(base: string, session: Session | null, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      ...(session ? session.auth : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let json: any = undefined;
  try {
    json = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

export async function createAgent(base: string, session: Session, name = 'agent', logOutputs = 'hash') {
  const res = await api(base, session, 'POST', '/agents', { name, log_outputs: logOutputs });
  if (res.status !== 201) throw new Error(`create agent failed: ${res.status} ${res.text}`);
  return res.json as { id: string; api_key: string; api_key_prefix: string; name: string; log_outputs: string; proxy_url: string };
}

/** The caller of `token` again, as the service signs a token with `jwtSecret`, expiring `seconds` from now: a test of what happens at expiry need not wait JWT_TTL_SECONDS (at least 60). */
export async function tokenExpiringIn(token: string, jwtSecret: string, seconds: number): Promise<string> {
  const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as { sub: string; org: string };
  return new SignJWT({ org: claims.org }).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setSubject(claims.sub)
    .setIssuer(JWT_ISSUER).setAudience(JWT_AUDIENCE).setIssuedAt().setExpirationTime(Math.floor(Date.now() / 1000) + seconds).sign(new TextEncoder().encode(jwtSecret));
}

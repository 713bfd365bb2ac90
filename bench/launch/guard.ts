// The guard under test: the all-in-one service (`node dist/server/main.js`) in its own
// process with a fresh data directory, and the admin API calls that give it an
// org, agents, a credential for the upstream and a policy, as a user would.
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { CA_FILE, guardScript } from '../paths.js';
import { BENCH_POLICY } from '../policy.js';
import { startProcess } from '../processes.js';
import type { Target } from '../target.js';

export const BENCH_PASSWORD = 'bench password, not a secret';

export interface GuardTarget extends Target {
  /** The data directory (removed with the bench's temp dir). */
  dataDir: string;
}

export async function startGuard(tmpDir: string, upstreamAuthority: string, variant: { name: 'guard' | 'guard-quiet' | 'guard-profiled'; env: Record<string, string>; nodeArgs?: string[] } = { name: 'guard', env: {} }): Promise<GuardTarget> {
  const dataDir = mkdtempSync(join(tmpDir, 'guard-data-'));
  const { proc, match } = await startProcess({
    name: variant.name,
    command: process.execPath,
    args: [...(variant.nodeArgs ?? []), ...guardScript()],
    env: {
      ...process.env,
      PORT: '0',
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      GUARD_ALLOW_TARGETS: '127.0.0.1',
      NODE_EXTRA_CA_CERTS: CA_FILE,
      LOG_LEVEL: 'warn',
      ...variant.env,
    },
    ready: /listening on http:\/\/127\.0\.0\.1:(\d+)/,
    readyTimeoutMs: 60_000,
  });
  return {
    name: variant.name,
    origin: `http://127.0.0.1:${match[1]}`,
    pathFor: (upstreamPath, key) => {
      if (key === undefined) throw new Error('bench: a guard path needs an agent key');
      return `/proxy/${key}/${upstreamAuthority}${upstreamPath}`;
    },
    proc,
    dataDir,
  };
}

/** One organization of the bench, as its owner sees it through the admin API. */
export class GuardOrg {
  readonly base: string;
  readonly token: string;
  readonly email: string;

  private constructor(base: string, email: string, token: string) {
    this.base = base;
    this.email = email;
    this.token = token;
  }

  /** POST /auth/signup: a new user, and with it a new organization. */
  static async signup(base: string, label: string): Promise<GuardOrg> {
    const email = `bench-${label}-${Date.now()}@bench.invalid`;
    const body = await call(base, null, 'POST', '/auth/signup', { email, password: BENCH_PASSWORD }, 201);
    return new GuardOrg(base, email, (body as { access_token: string }).access_token);
  }

  /**
   * A new organization on `base` set up as the bench's main one: the upstream's
   * bearer credential and one agent (`name`, `logOutputs`) under the bench policy.
   */
  static async withBenchAgent(base: string, label: string, upstreamAuthority: string, bearer: string, name: string, logOutputs: 'hash' | 'none'): Promise<{ org: GuardOrg; agent: { id: string; apiKey: string } }> {
    const org = await GuardOrg.signup(base, label);
    await org.createBearerCredential(upstreamAuthority, bearer);
    const agent = await org.createAgent(name, logOutputs);
    await org.setPolicy(agent.id, BENCH_POLICY);
    return { org, agent };
  }

  /** POST /agents → the new agent's id and full key. */
  async createAgent(name: string, logOutputs: 'full' | 'hash' | 'none'): Promise<{ id: string; apiKey: string }> {
    const body = (await call(this.base, this.token, 'POST', '/agents', { name, log_outputs: logOutputs }, 201)) as { id: string; api_key: string };
    return { id: body.id, apiKey: body.api_key };
  }

  /** POST /credentials: a bearer token injected on every call to `hostname` (host:port). */
  async createBearerCredential(hostname: string, value: string): Promise<void> {
    await call(this.base, this.token, 'POST', '/credentials', { name: 'bench-upstream', hostname, cred_type: 'bearer', value }, 201);
  }

  /** POST /agents/{id}/policy */
  async setPolicy(agentId: string, rulesYaml: string): Promise<void> {
    await call(this.base, this.token, 'POST', `/agents/${agentId}/policy`, { rules_yaml: rulesYaml }, 200);
  }

  /** Audit rows of this organization: X-Total-Count of GET /audit?limit=1. */
  async auditTotal(): Promise<number> {
    const res = await fetch(`${this.base}/audit?limit=1`, { headers: { authorization: `Bearer ${this.token}` } });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`GET /audit answered ${res.status}`);
    const total = Number(res.headers.get('x-total-count'));
    if (!Number.isSafeInteger(total)) throw new Error('GET /audit has no X-Total-Count header');
    return total;
  }
}

async function call(base: string, token: string | null, method: string, path: string, body: unknown, expected: number): Promise<unknown> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { 'content-type': 'application/json', ...(token !== null ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  if (res.status !== expected) throw new Error(`${method} ${path} answered ${res.status} (expected ${expected}): ${text.slice(0, 300)}`);
  return text.length > 0 ? JSON.parse(text) : undefined;
}

/** GET /health of the guard. */
export async function guardHealth(base: string): Promise<Record<string, unknown>> {
  const res = await fetch(`${base}/health`, { signal: AbortSignal.timeout(10_000) });
  return (await res.json()) as Record<string, unknown>;
}

/** Waits (bounded) until the guard's audit batcher holds nothing unwritten. */
export async function waitAuditFlushed(base: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const health = await guardHealth(base);
    if (health.audit_pending === 0) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

/**
 * Runs `task(i)` for i in [0, count) with at most `concurrency` at a time; `onProgress`
 * every `every` completions. The first failure stops the rest and is thrown.
 */
export async function inParallel(count: number, concurrency: number, task: (i: number) => Promise<void>, onProgress?: (done: number) => void, every = 1000): Promise<void> {
  let next = 0;
  let done = 0;
  let failure: unknown = null;
  const worker = async (): Promise<void> => {
    while (failure === null && next < count) {
      const i = next++;
      try {
        await task(i);
      } catch (err) {
        failure ??= err;
        return;
      }
      done++;
      if (onProgress !== undefined && done % every === 0) onProgress(done);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  if (failure !== null) throw failure;
}

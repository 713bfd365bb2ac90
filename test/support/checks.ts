// Small assertions and waits shared by the integration and adversarial tests.
import { request as httpRequest } from 'node:http';
import type { Test } from 'tap';
import { api, eventually, type Session } from './service.js';

export type Reply = Awaited<ReturnType<typeof api>>;

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The contract's error answer: the status, JSON content type and `{error, message}`; the message names `field` when given. */
export function assertError(t: Test, res: Reply, status: number, code: string, field?: string): void {
  t.equal(res.status, status, `status ${status} (${res.text.slice(0, 300)})`);
  t.match(res.headers.get('content-type') ?? '', /^application\/json/, 'JSON content type');
  t.equal(res.json?.error, code, `error code ${code}`);
  t.type(res.json?.message, 'string', 'a message');
  t.ok((res.json?.message ?? '').length > 0, 'message is not empty');
  if (field !== undefined) {
    t.match(res.json?.message, field, `message names ${field}`);
    t.equal(res.json?.field, field, `field is ${field}`); // the message naming it is not enough: 'header_name' holds 'name'
  }
}

/** A JSON request from a chosen loopback source address (Linux routes all of 127/8 to lo). */
export function requestFrom(base: string, localAddress: string, method: string, path: string, body: unknown, extraHeaders: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const req = httpRequest(`${base}${path}`, {
      method,
      localAddress,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...extraHeaders },
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const headers = new Headers();
        for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') headers.set(name, value);
        let json: any;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers, text, json });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** An agent's audit rows, newest first, once at least `count` of them are there. */
export async function auditRows(base: string, session: Session, agentId: string, count: number, ms = 5000): Promise<any[]> {
  return eventually(async () => {
    const res = await api(base, session, 'GET', `/audit?agent_id=${agentId}&limit=1000`);
    return Array.isArray(res.json) && res.json.length >= count ? (res.json as any[]) : undefined;
  }, ms);
}

/** Milliseconds a GET /health takes, or Infinity when it fails. */
export async function healthLatency(base: string, timeoutMs = 2000): Promise<number> {
  const started = performance.now();
  try {
    const res = await fetch(`${base}/health`, { signal: AbortSignal.timeout(timeoutMs) });
    await res.arrayBuffer();
    return res.status === 200 ? performance.now() - started : Infinity;
  } catch {
    return Infinity;
  }
}

/**
 * Probes /health every `everyMs` until stopped; returns every latency measured.
 * One probe at a time, so a slow answer shows as one long sample, not as a pile-up.
 */
export function probeHealth(base: string, everyMs = 50): { stop(): Promise<number[]>; at: number[] } {
  const samples: number[] = [];
  /** When each probe started, in ms from the start of probing. */
  const at: number[] = [];
  const started = performance.now();
  let running = true;
  const loop = (async () => {
    while (running) {
      at.push(performance.now() - started);
      samples.push(await healthLatency(base));
      await sleep(everyMs);
    }
  })();
  return {
    at,
    async stop() {
      running = false;
      await loop;
      return samples;
    },
  };
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

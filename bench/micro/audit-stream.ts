// The live audit stream's cost to the proxy: one all-in-one process, the same
// proxied small GETs with no GET /audit/stream open and then with 100 open (each
// with no filter, so each gets every entry). Prints the process's CPU per call
// in both runs (from /proc, so the bench's own client is not counted) and checks
// that every subscriber got every entry. The subscribers cost per poll and per
// delivered event (one JSON per entry, one corked write per subscriber), nothing
// in the proxy's per-call path: the poller reads what the audit batcher wrote.
//   npm run bench:audit-stream      (CALLS=10000 SUBSCRIBERS=100 by default)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { GuardOrg, inParallel, startGuard } from '../launch/guard.js';
import { startUpstream } from '../launch/upstream.js';
import { cpuSeconds } from '../proc-stats.js';
import { stopAll } from '../processes.js';
import { SMALL_PATH } from '../routes.js';

const CALLS = Number(process.env.CALLS ?? 10_000);
const SUBSCRIBERS = Number(process.env.SUBSCRIBERS ?? 100);
const CONCURRENCY = 32;

const tmp = mkdtempSync(join(tmpdir(), 'tcg-audit-stream-'));
try {
  const upstream = await startUpstream();
  const guard = await startGuard(tmp, upstream.authority, { name: 'guard', env: { AUDIT_STREAMS_PER_ORG: String(SUBSCRIBERS), AUDIT_STREAMS_MAX: String(Math.max(256, SUBSCRIBERS)) } });
  const pid = guard.proc!.child.pid!;
  const org = await GuardOrg.signup(guard.origin, 'stream');
  const agent = await org.createAgent('streamed', 'none');
  const dispatcher = new Agent({ connections: CONCURRENCY });
  const url = `${guard.origin}${guard.pathFor(SMALL_PATH, agent.apiKey)}`;
  const calls = async (n: number) => {
    await inParallel(n, CONCURRENCY, async () => {
      const res = await request(url, { dispatcher });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`a proxied call answered ${res.statusCode}`);
    });
  };
  /** CPU seconds of the guard process per call over `n` calls, after the audit of the calls is written and streamed. */
  const measure = async (n: number, settle: () => Promise<void>): Promise<number> => {
    const before = cpuSeconds(pid)!;
    await calls(n);
    await settle();
    return (cpuSeconds(pid)! - before) / n;
  };
  const written = async (total: number) => {
    while ((await org.auditTotal()) < total) await new Promise((r) => setTimeout(r, 100));
  };

  await calls(2000); // warm-up: JIT, caches, connections
  await written(2000);
  const idleCpu = await measure(CALLS, () => written(2000 + CALLS));

  // 100 subscribers, each counting the events it receives.
  const received = new Array<number>(SUBSCRIBERS).fill(0);
  const streams = await Promise.all(Array.from({ length: SUBSCRIBERS }, async (_, i) => {
    const res = await request(`${guard.origin}/audit/stream`, { headers: { authorization: `Bearer ${org.token}` }, dispatcher: new Agent({ connections: 1, bodyTimeout: 0 }) });
    if (res.statusCode !== 200) throw new Error(`GET /audit/stream answered ${res.statusCode}`);
    const marker = 'event: audit\n';
    let carry = ''; // the end of the last chunk, so a marker split across chunks is counted once
    res.body.on('data', (chunk: Buffer) => {
      const text = carry + chunk.toString('latin1');
      received[i]! += text.split(marker).length - 1;
      carry = text.slice(-(marker.length - 1));
    });
    return res.body;
  }));
  const allDelivered = async () => {
    const deadline = Date.now() + 30_000;
    while (received.some((n) => n < CALLS) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  };
  const streamedCpu = await measure(CALLS, allDelivered);
  for (const s of streams) s.destroy();

  const us = (s: number) => (s * 1e6).toFixed(1);
  const complete = received.every((n) => n === CALLS);
  console.log(`${CALLS} proxied small GETs, ${CONCURRENCY} at a time, one all-in-one process:`);
  console.log(`  no stream open:           ${us(idleCpu)} µs of process CPU per call`);
  console.log(`  ${SUBSCRIBERS} streams open:         ${us(streamedCpu)} µs per call, every stream's events included (${((streamedCpu / idleCpu - 1) * 100).toFixed(0)}% more)`);
  console.log(`  per delivered event:      ${us((streamedCpu - idleCpu) / SUBSCRIBERS)} µs (${SUBSCRIBERS} events per call)`);
  console.log(`  every subscriber got every entry: ${complete ? 'yes' : `no (${Math.min(...received)} to ${Math.max(...received)} of ${CALLS})`}`);
  if (!complete) process.exitCode = 1;
} finally {
  await stopAll();
  rmSync(tmp, { recursive: true, force: true });
}

// Exhaustion: slow clients, stalling and endless upstreams, and a thousand open
// connections. Throughout, the service (in this process) keeps answering
// /health within 100 ms, and its memory stays bounded.
//
// What bounds a slow client is uWS's own timer (measured on this build): a
// connection is closed ~10 s (+ up to its 4 s timer tick) after its request
// began unless the request completes, or its body arrives at 16 KiB/s or more.
// So a slow-loris head or a trickled body holds a socket for ~11 s at most.
import { connect, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import { auditRows, healthLatency, percentile, probeHealth, sleep } from '../support/checks.js';
import { createAgent, signup, startTestService } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';

const HEADERS_TIMEOUT_MS = 1000;
const BODY_TIMEOUT_MS = 1000;
const CONNECT_TIMEOUT_MS = 1000;
const CAPTURE_BYTES = 8192;
/** The issue's bound on /health latency while under attack. */
const HEALTH_MS = 100;

/**
 * /health answered within HEALTH_MS throughout. The test machine is shared (other
 * suites and benchmarks run beside this one), so one probe in fifty may be late
 * by scheduling noise; none may be blocked (over 500 ms), which is what a service
 * stalled by the attack would show.
 */
function assertResponsive(t: Test, samples: number[], what: string): void {
  const late = samples.filter((ms) => ms >= HEALTH_MS).length;
  t.ok(samples.length >= 20, `${what}: ${samples.length} /health probes`);
  t.ok(late <= Math.floor(samples.length / 50), `${what}: ${late} of ${samples.length} probes at or over ${HEALTH_MS} ms (p50 ${percentile(samples, 50).toFixed(1)} ms, p98 ${percentile(samples, 98).toFixed(1)} ms)`);
  t.ok(Math.max(...samples) < 500, `${what}: slowest probe ${Math.max(...samples).toFixed(1)} ms`);
}

const upstream = await startUpstream();
const service = await startTestService({
  UPSTREAM_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
  UPSTREAM_BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS),
  UPSTREAM_CONNECT_TIMEOUT_MS: String(CONNECT_TIMEOUT_MS),
  OUTPUT_CAPTURE_BYTES: String(CAPTURE_BYTES),
});
const base = service.url;
const opened: Socket[] = [];
t.teardown(async () => {
  for (const s of opened) s.destroy();
  await service.close();
  await upstream.close();
});

const owner = await signup(base);
const agent = await createAgent(base, owner, 'exhaustion', 'full');
const PROXY = `/proxy/${agent.api_key}/${upstream.authority}`;

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(service.port, '127.0.0.1');
    socket.setNoDelay(true);
    opened.push(socket);
    socket.once('connect', () => resolve(socket));
    socket.once('error', reject);
  });
}

const closedAt = (socket: Socket, started: number) => new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now() - started)));

/** Writes `text` one byte every `everyMs` until done or the socket closes. */
async function trickle(socket: Socket, text: string, everyMs: number): Promise<number> {
  let sent = 0;
  for (const ch of text) {
    if (socket.destroyed) break;
    socket.write(ch);
    sent++;
    await sleep(everyMs);
  }
  return sent;
}

const MB = 1024 * 1024;
/** How much the process's RSS may grow while it holds the 1,000 connections. */
const RSS_GROWTH_BOUND = 128 * MB;
const rss = () => process.memoryUsage().rss;

// ---------------------------------------------------------------------------
// Slow clients, started now: their sockets are checked for closing at the end.

const lorisStarted = Date.now();
const lorises = await Promise.all(Array.from({ length: 20 }, () => open()));
const lorisClosed = lorises.map((s) => closedAt(s, lorisStarted));
// A head that would take 5 minutes at a byte a second.
const lorisSending = lorises.map((s) => trickle(s, `GET ${PROXY}/echo HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(300)}\r\n\r\n`, 1000));

t.test('slow-loris heads (a byte a second): other clients are unaffected, /health answers within 100 ms', async (t) => {
  const probe = probeHealth(base, 50);
  const before = upstream.seen.length;
  for (let i = 0; i < 20; i++) {
    const res = await fetch(`${base}${PROXY}/json`);
    t.equal(res.status, 200);
    await res.arrayBuffer();
    await sleep(100);
  }
  t.equal(upstream.seen.length, before + 20, 'every normal call went through');
  assertResponsive(t, await probe.stop(), 'slow-loris');
});

t.test('a slow body upload (proxy and admin): other clients are unaffected', async (t) => {
  const up = await open();
  const upClosed = closedAt(up, Date.now());
  up.write(`POST ${PROXY}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n`);
  const adminUp = await open();
  adminUp.write(`POST /agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${owner.token}\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"name":"`);
  const probe = probeHealth(base, 50);
  const uploading = Promise.all([trickle(up, 'b'.repeat(40), 100), trickle(adminUp, 'c'.repeat(40), 100)]);
  for (let i = 0; i < 10; i++) {
    const res = await fetch(`${base}/agents`, { headers: owner.auth });
    t.equal(res.status, 200, 'admin reads are served');
    await res.arrayBuffer();
    await sleep(200);
  }
  await uploading;
  assertResponsive(t, await probe.stop(), 'slow uploads');
  up.destroy();
  adminUp.destroy();
  await upClosed;
  const rows = await auditRows(base, owner, agent.id, 21);
  t.ok(rows.some((r) => r.status_code === 499 && r.action === 'POST'), 'the abandoned upload is audited as 499');
});

// undici runs its head and body deadlines on its "fast timers" (lib/util/timers.js:
// a 499 ms tick, the clock advanced one tick per tick), so a deadline fires up to
// one tick before or after the configured time; the bounds below allow that tick.
const TICK_MS = 500;

t.test('an upstream that stalls after the request: 504 at UPSTREAM_HEADERS_TIMEOUT_MS; a stalled body or TLS handshake is cut too', async (t) => {
  const started = performance.now();
  const res = await fetch(`${base}${PROXY}/stall-headers`);
  const elapsed = performance.now() - started;
  t.equal(res.status, 504);
  t.equal(((await res.json()) as { error: string }).error, 'upstream_timeout');
  t.ok(elapsed >= HEADERS_TIMEOUT_MS - TICK_MS && elapsed < HEADERS_TIMEOUT_MS + TICK_MS + 100, `504 after ${elapsed.toFixed(0)} ms (deadline ${HEADERS_TIMEOUT_MS} ms)`);

  // Head and a first chunk, then nothing: the client sees a cut connection, the audit a 504.
  const bodyStarted = performance.now();
  const partial = await fetch(`${base}${PROXY}/stall-body`);
  t.equal(partial.status, 200, 'the head was passed on');
  const read = await partial.text().then(() => 'complete', () => 'cut');
  t.equal(read, 'cut', 'the body ends in an error, not a clean end');
  const bodyElapsed = performance.now() - bodyStarted;
  t.ok(bodyElapsed < BODY_TIMEOUT_MS + TICK_MS + 100, `cut after ${bodyElapsed.toFixed(0)} ms (deadline ${BODY_TIMEOUT_MS} ms)`);

  // A listener that accepts TCP and never completes the TLS handshake: a connect timeout (502, docs/api.md).
  const { createServer } = await import('node:net');
  const held: Socket[] = [];
  const silent = createServer((socket) => held.push(socket));
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  const port = (silent.address() as import('node:net').AddressInfo).port;
  const connectStarted = performance.now();
  const hung = await fetch(`${base}/proxy/${agent.api_key}/127.0.0.1:${port}/x`);
  const connectElapsed = performance.now() - connectStarted;
  const body = (await hung.json()) as { error: string; message: string };
  t.equal(hung.status, 502, 'a silent TLS peer: 502');
  t.equal(body.error, 'upstream_unreachable');
  t.match(body.message, /connect timeout/);
  t.ok(connectElapsed < CONNECT_TIMEOUT_MS + TICK_MS + 100, `answered after ${connectElapsed.toFixed(0)} ms (deadline ${CONNECT_TIMEOUT_MS} ms)`);
  for (const socket of held) socket.destroy();
  silent.close();

  const rows = await auditRows(base, owner, agent.id, 24);
  const last = rows.slice(0, 3).map((r) => `${r.tool_url.replace(/.*\//, '/')} ${r.status_code}`).sort();
  t.same(last, ['/stall-body 504', '/stall-headers 504', '/x 502'], `each audited with its outcome (${JSON.stringify(rows.slice(0, 4).map((r) => [r.tool_url, r.status_code]))})`);
});

t.test('an endless upstream body to a log_outputs: full agent: the capture stays at OUTPUT_CAPTURE_BYTES, memory stays flat', async (t) => {
  // A fast reader: 64 MiB streamed through.
  const fastBefore = rss();
  const res = await fetch(`${base}${PROXY}/endless`);
  const reader = res.body!.getReader();
  let received = 0;
  let peak = rss();
  while (received < 64 * MB) {
    const { done, value } = await reader.read();
    if (done) break;
    received += value.byteLength;
    if ((received & (4 * MB - 1)) < value.byteLength) peak = Math.max(peak, rss());
  }
  await reader.cancel();
  t.ok(received >= 64 * MB, `${(received / MB).toFixed(0)} MiB streamed`);
  t.ok(peak - fastBefore < 100 * MB, `RSS grew ${((peak - fastBefore) / MB).toFixed(1)} MiB while 64 MiB streamed (bound 100 MiB)`);

  // A reader that stops reading: back-pressure must hold the upstream, not buffer it.
  const socket = await open();
  socket.write(`GET ${PROXY}/endless HTTP/1.1\r\nHost: x\r\n\r\n`);
  await new Promise<void>((r) => socket.once('data', () => r()));
  socket.pause();
  const pausedBefore = rss();
  let pausedPeak = pausedBefore;
  for (let i = 0; i < 20; i++) {
    await sleep(100);
    pausedPeak = Math.max(pausedPeak, rss());
  }
  t.ok(pausedPeak - pausedBefore < 32 * MB, `RSS grew ${((pausedPeak - pausedBefore) / MB).toFixed(1)} MiB in 2 s while the client read nothing (bound 32 MiB)`);
  t.ok((await healthLatency(base)) < 500, '/health answers meanwhile');
  socket.destroy();

  const rows = await auditRows(base, owner, agent.id, 26);
  const endless = rows.filter((r) => r.tool_url.endsWith('/endless'));
  t.equal(endless.length, 2, 'both calls audited');
  for (const row of endless) {
    t.equal(row.status_code, 499, 'as client-gone');
    t.equal(row.output_truncated, true);
    t.equal(row.output.length, CAPTURE_BYTES, `output is exactly the cap (${row.output.length})`);
    t.ok(row.response_bytes > CAPTURE_BYTES, `response_bytes ${row.response_bytes}`);
  }
});

t.test('1,000 concurrent connections (idle, mid-head, mid-body, stalled upstream, endless response unread): /health within 100 ms, RSS bounded', async (t) => {
  const IDLE = 400;
  const MID_HEAD = 250;
  const MID_BODY = 150;
  const IN_FLIGHT = 200;
  const baseline = rss();
  const probe = probeHealth(base, 50);
  const probeStart = performance.now();
  const rssSamples: number[] = [];
  const sampler = setInterval(() => rssSamples.push(rss()), 100);
  const sockets: Socket[] = [];
  const seenBefore = upstream.seen.length;
  for (let i = 0; i < IDLE + MID_HEAD + MID_BODY + IN_FLIGHT; i++) {
    const s = await open();
    s.on('error', () => undefined);
    s.on('data', () => undefined);
    sockets.push(s);
    if (i < IDLE) continue;
    if (i < IDLE + MID_HEAD) s.write(`GET ${PROXY}/echo HTTP/1.1\r\nHost: x\r\nX-Partial: `);
    else if (i < IDLE + MID_HEAD + MID_BODY) s.write(`POST ${PROXY}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n${'d'.repeat(1000)}`);
    else if (i % 10 !== 0) s.write(`GET ${PROXY}/stall-headers?n=${i} HTTP/1.1\r\nHost: x\r\n\r\n`);
    else {
      // An endless response to a client that reads nothing: held by back-pressure.
      s.pause();
      s.write(`GET ${PROXY}/endless?n=${i} HTTP/1.1\r\nHost: x\r\n\r\n`);
    }
  }
  t.equal(sockets.length, 1000, '1,000 sockets open');
  const openedAt = performance.now();
  // Hold them all for a while, making normal calls meanwhile.
  const started = Date.now();
  let normal = 0;
  while (Date.now() - started < 3000) {
    const res = await fetch(`${base}/agents`, { headers: owner.auth });
    if (res.status === 200) normal++;
    await res.arrayBuffer();
    await sleep(100);
  }
  clearInterval(sampler);
  const samples = await probe.stop();
  t.comment(`slow probes (ms since start: latency): ${samples.map((ms, i) => [probe.at[i]!, ms] as const).filter(([, ms]) => ms >= HEALTH_MS).map(([a, ms]) => `${a.toFixed(0)}:${ms.toFixed(0)}`).join(' ')}; sockets opened by ${(openedAt - probeStart).toFixed(0)}`);
  const peak = Math.max(...rssSamples);
  t.comment(`RSS baseline ${(baseline / MB).toFixed(0)} MiB, peak ${(peak / MB).toFixed(0)} MiB (+${((peak - baseline) / MB).toFixed(1)} MiB); /health p50 ${percentile(samples, 50).toFixed(1)} ms, p99 ${percentile(samples, 99).toFixed(1)} ms, max ${Math.max(...samples).toFixed(1)} ms over ${samples.length} probes`);
  t.ok(normal >= 10, `${normal} normal admin calls served meanwhile`);
  assertResponsive(t, samples, '1,000 connections');
  // Measured on this machine: +14 to +60 MiB over a ~650 MiB baseline (most of
  // which is the embedded ClickHouse engine); the bound is about twice the worst.
  t.ok(peak - baseline < RSS_GROWTH_BOUND, `RSS grew ${((peak - baseline) / MB).toFixed(1)} MiB (bound ${RSS_GROWTH_BOUND / MB} MiB)`);
  t.ok(upstream.seen.length - seenBefore >= IN_FLIGHT * 0.5, `${upstream.seen.length - seenBefore} in-flight requests reached the (stalling) upstream`);
  for (const s of sockets) s.destroy();
  // A thousand closes (and their audit rows) are a burst of work of their own: settled within 2 s.
  let settled = Infinity;
  for (let i = 0; i < 20 && settled >= HEALTH_MS; i++) {
    await sleep(100);
    settled = await healthLatency(base);
  }
  t.ok(settled < HEALTH_MS, `healthy after they all went away (${settled.toFixed(1)} ms)`);
});

t.test('slow-loris connections are closed by the server (~10 s after they began), never served', async (t) => {
  const closedAfter = await Promise.race([Promise.all(lorisClosed), sleep(20_000).then(() => null)]);
  t.ok(closedAfter !== null, 'every slow-loris socket was closed by the server');
  if (closedAfter !== null) t.ok(Math.max(...closedAfter) < 16_000, `closed after ${Math.min(...closedAfter)}–${Math.max(...closedAfter)} ms`);
  const sent = await Promise.all(lorisSending);
  t.ok(Math.max(...sent) < 30, `at most ${Math.max(...sent)} bytes of each head were sent before the close`);
});

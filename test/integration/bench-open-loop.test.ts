// The bench's open-loop generator (bench/load/open-loop-worker.ts, the fixed-rate
// scenario's when wrk2 is absent) keeps its rate whatever the target does, and
// counts each latency from the request's scheduled instant: a target that
// stalls its event loop for 300 ms shows the stall in the requests scheduled
// during it (coordinated omission corrected), not only in the one it held.
import { createServer } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createOpenLoop } from '../../bench/load/worker-generators.js';

t.test('the open-loop generator holds its rate and counts a stall in every request behind it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-open-loop-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  let served = 0;
  const server = createServer((_req, res) => {
    served++;
    // The 300th request stalls the whole server for 300 ms, as a long GC pause would.
    if (served === 300) {
      const until = Date.now() + 300;
      while (Date.now() < until);
    }
    res.end('ok');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const { port } = server.address() as { port: number };
  const result = await createOpenLoop().run({ origin: `http://127.0.0.1:${port}`, paths: ['/'], method: 'GET', bodyBytes: 0, connections: 8, durationSec: 2, rate: 500 }, dir);
  t.ok(result.requests >= 950 && result.requests <= 1000, `about 1,000 requests in 2 s at 500/s (${result.requests})`);
  t.equal(result.errors, 0);
  t.ok(result.p50Ms < 50, `the median is not the stall (${result.p50Ms.toFixed(2)} ms)`);
  // At 500/s, ~150 requests were due during the 300 ms stall: far more than 1 % of 1,000.
  t.ok(result.p99Ms > 150, `the stall is in the p99 (${result.p99Ms.toFixed(1)} ms)`);
  t.ok(result.p999Ms !== undefined && result.p999Ms >= result.p99Ms, 'p99.9 is reported, at least the p99');
});

t.test('the open-loop generator spreads its rate over all its connections, as wrk2 does', async (t) => {
  // Through one pool most connections sat idle until a server's idle timeout
  // closed them, and the generator reopened them mid-run in a burst of TLS
  // handshakes that was in every comparator's p99.9.
  const dir = mkdtempSync(join(tmpdir(), 'tcg-open-loop-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const perConnection = new Map<number, number>();
  const server = createServer((req, res) => {
    const port = req.socket.remotePort!;
    perConnection.set(port, (perConnection.get(port) ?? 0) + 1);
    res.end('ok');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const { port } = server.address() as { port: number };
  const result = await createOpenLoop().run({ origin: `http://127.0.0.1:${port}`, paths: ['/'], method: 'GET', bodyBytes: 0, connections: 8, durationSec: 1, rate: 400 }, dir);
  t.equal(result.errors, 0);
  const counts = [...perConnection.values()];
  t.equal(counts.length, 8, 'one connection each, none reopened');
  const total = counts.reduce((a, b) => a + b, 0);
  t.ok(Math.min(...counts) >= (total / 8) * 0.8, `every connection carries its share of ${total} requests (${counts.join(', ')})`);
});

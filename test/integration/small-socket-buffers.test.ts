// The slow-client tests of the proxy, the audit stream and the OpenAPI
// document again, where the kernel gives each TCP socket a send buffer of at
// most 64 KiB (as under memory pressure, or on a host tuned small): the service
// then meets a full socket often, and uWS holds bytes the client has not taken. Two faults showed only there (stream-response.ts):
// uWS dropped a write larger than its cork buffer when the framing corked
// before it could not all be sent, and held its last bytes when nothing more
// came from the upstream. With the host's large buffers they were rare (one CI
// run in many).
//
// The buffer limit is a sysctl of the network namespace, so the tests run in a
// namespace of their own (`unshare --net --map-root-user`), where only loopback
// exists: the upstream, the proxy and the client all stay in it.
import { spawnSync } from 'node:child_process';
import t from 'tap';
import { runTestFileInChild } from '../support/test-file-in-child.js';

const SETUP = 'ip link set lo up && sysctl -qw net.ipv4.tcp_wmem="4096 16384 65536" && exec "$@"';
/** The tests whose clients fall behind: their file, a TAP_GREP that selects them, how many. */
const SLOW_CLIENT_TESTS: readonly (readonly [file: string, grep: string, count: number])[] = [
  ['test/integration/proxy.test.ts', '/reads slowly|slow readers at once|always behind|quiet after a burst/', 4],
  ['test/integration/audit-stream.test.ts', '/reads slowly/', 1],
  ['test/integration/operability.test.ts', '/reads late/', 1],
];

const probe = spawnSync('unshare', ['--net', '--map-root-user', 'sh', '-c', SETUP, 'sh', 'true'], { encoding: 'utf8' });
const unavailable = probe.error !== undefined || probe.status !== 0
  ? `cannot make a network namespace with small socket buffers here (unshare --net --map-root-user: ${probe.error?.message ?? probe.stderr.trim()})`
  : false;

for (const [file, grep, count] of SLOW_CLIENT_TESTS) {
  t.test(`${file}: slow clients get every byte with 64 KiB socket send buffers`, { skip: unavailable }, async (t) => {
    const started = Date.now();
    const { code, out, passed: ran, failed } = await runTestFileInChild(file, { TAP_GREP: grep }, 90_000, ['unshare', '--net', '--map-root-user', 'sh', '-c', SETUP, 'sh']);
    t.comment(`in a namespace with small buffers: ${ran.length} tests passed, ${failed.length} assertions failed, exit ${code}, ${Date.now() - started} ms`);
    t.equal(code, 0, 'they passed');
    t.strictSame(failed, [], 'no failing assertion');
    t.equal(ran.length, count, `all ${count} ran`);
    if (code !== 0 || failed.length > 0) t.comment(out);
  });
}

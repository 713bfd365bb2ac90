// 10,000 calls held at once on one all-in-one process (a rule with decision:
// approve, APPROVAL_HOLD_S long enough): what they add to the process's RSS
// over its idle RSS, and the CPU it spends while they wait (no polling per call).
// Each call is a real connection sending a small POST; nothing is forwarded.
// Fails above 100 MB.
//   npm run bench:held-calls
import { connect, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GuardOrg, inParallel, startGuard } from '../launch/guard.js';
import { cpuSeconds, rssMiB } from '../proc-stats.js';
import { stopAll } from '../processes.js';

const HELD = Number(process.env.HELD_CALLS ?? 10_000);
const MAX_MB = 100;
const WAIT_S = 5;

const tmp = mkdtempSync(join(tmpdir(), 'tcg-held-'));
const guard = await startGuard(tmp, '127.0.0.1:1', { name: 'guard', env: { APPROVAL_HOLD_S: '3600', METRICS_ENABLED: 'true' } });
const pid = guard.proc!.child.pid!;
const { port } = new URL(guard.origin);

try {
  const org = await GuardOrg.signup(guard.origin, 'held');
  const agent = await org.createAgent('payer', 'none');
  await org.setPolicy(agent.id, 'version: "1"\nrules:\n  - {name: hold, tool: "*", action: POST, decision: approve}\n  - {name: no, tool: "*", action: GET, decision: deny}\n');
  const request = (method: string) =>
    `${method} /proxy/${agent.apiKey}/127.0.0.1:1/pay HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nx-agent-reasoning: bench\r\ncontent-length: 17\r\n\r\n{"amount": 12345}`;

  const held = async (): Promise<number> => {
    const text = await (await fetch(`${guard.origin}/metrics`)).text();
    return Number(/^tcg_approvals_held (\d+)/m.exec(text)?.[1] ?? -1);
  };
  const open = (method: string): Promise<Socket> =>
    new Promise((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => {
        socket.write(request(method));
        resolve(socket);
      });
      socket.on('error', reject);
    });

  // Warm up: the same path, held and let go, so that idle RSS includes what any served process has.
  const warm = await Promise.all(Array.from({ length: 500 }, () => open('POST')));
  while ((await held()) < 500) await new Promise((r) => setTimeout(r, 50));
  for (const socket of warm) socket.destroy();
  while ((await held()) > 0) await new Promise((r) => setTimeout(r, 50));
  await new Promise((r) => setTimeout(r, 2000));
  const idle = rssMiB(pid)!;
  const idleCpuBefore = cpuSeconds(pid)!;
  await new Promise((r) => setTimeout(r, WAIT_S * 1000));
  const cpuIdle = cpuSeconds(pid)! - idleCpuBefore;

  const sockets: Socket[] = [];
  await inParallel(HELD, 200, async () => {
    sockets.push(await open('POST'));
  });
  while ((await held()) < HELD) await new Promise((r) => setTimeout(r, 100));
  const cpuBefore = cpuSeconds(pid)!;
  await new Promise((r) => setTimeout(r, WAIT_S * 1000));
  const cpuWaiting = cpuSeconds(pid)! - cpuBefore;
  const loaded = rssMiB(pid)!;
  const added = (loaded - idle) * 1.048576; // MiB → MB

  console.log(`${HELD} calls held at once: RSS ${idle.toFixed(0)} MiB idle → ${loaded.toFixed(0)} MiB held: +${added.toFixed(1)} MB (${((added * 1e6) / HELD / 1024).toFixed(1)} KB per held call); goal under ${MAX_MB} MB`);
  console.log(`CPU over ${WAIT_S} s: ${(cpuIdle * 1000).toFixed(0)} ms idle, ${(cpuWaiting * 1000).toFixed(0)} ms with them waiting (the process's own timers: audit batcher, caches)`);
  for (const socket of sockets) socket.destroy();
  if (added > MAX_MB) process.exitCode = 1;
} finally {
  await stopAll();
  rmSync(tmp, { recursive: true, force: true });
}

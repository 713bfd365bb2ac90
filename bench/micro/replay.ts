// Policy replay at scale: a million audit rows of one agent seeded in bulk into
// an embedded ClickHouse (chDB) in a temporary directory, then the replay
// POST /policy/replay runs (admin/replay.ts), timed. The goal is under 10 s.
//   npm run bench:replay [-- rows]
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { replayPolicy } from '../../admin/replay.js';
import { parsePolicy } from '../../shared/policy/index.js';
import { ClickHouseAuditStore } from '../../shared/stores/clickhouse/clickhouse-audit-store.js';
import type { AuditRecord } from '../../shared/types.js';

const ROWS = Number(process.argv[2] ?? 1_000_000);
const CHUNK = 100_000;
const GOAL_SECONDS = 10;

const dir = mkdtempSync(join(tmpdir(), 'tcg-replay-bench-'));
const store = await ClickHouseAuditStore.open({ url: null, dataDir: dir, retentionDays: 365 });
try {
  const orgId = randomUUID();
  const agentId = randomUUID();
  const tools = Array.from({ length: 20 }, (_, i) => `tool-${i}.example.com`);
  const actions = ['GET', 'POST', 'DELETE', 'PUT'];
  const base = Date.now() - 3 * 86_400_000;
  const seedStarted = performance.now();
  for (let start = 0; start < ROWS; start += CHUNK) {
    let body = '';
    for (let i = start; i < Math.min(ROWS, start + CHUNK); i++) {
      const tool = tools[i % tools.length]!;
      const record: AuditRecord = {
        id: randomUUID(), timestamp: new Date(base + i * 200).toISOString(), orgId, agentId, agentName: 'bench',
        toolName: tool, action: actions[i % actions.length]!, toolUrl: `https://${tool}/items/${i % 500}`,
        decision: i % 7 === 0 ? 'denied' : 'allowed', reasoning: '', taskId: '', latencyMs: 5, statusCode: 200,
        ruleMatched: 'default', source: 'proxy', requestBytes: 0, responseBytes: 100, outputHash: null, output: null,
        outputTruncated: false, requestId: randomUUID(), mcpSessionId: null,
        mcpMethod: i % 3 === 0 ? 'tools/call' : null, mcpTool: i % 3 === 0 ? `tool_${i % 40}` : null,
        shadowRule: null, shadowDecision: null, policyPath: `/items/${i % 500}`, policyDecided: true, approvalId: null,
      };
      body += store.encode(record);
    }
    await store.insertEncoded(body, randomUUID());
  }
  const seedSeconds = (performance.now() - seedStarted) / 1000;
  const candidate = parsePolicy(`version: "1"
rules:
  - name: no-deletes
    tool: "*"
    action: DELETE
    decision: deny
  - name: no-destructive-tools
    tool: "*"
    action: POST
    mcp_tool: "tool_1*"
    decision: deny
`);
  const times: number[] = [];
  let result = await replayPolicy(store, orgId, agentId, new Date(base - 1000), new Date(), candidate);
  for (let run = 0; run < 3; run++) {
    const started = performance.now();
    result = await replayPolicy(store, orgId, agentId, new Date(base - 1000), new Date(), candidate);
    times.push((performance.now() - started) / 1000);
  }
  const best = Math.min(...times);
  console.log(`rows: ${ROWS.toLocaleString('en-US')} (seeded in ${seedSeconds.toFixed(1)} s)`);
  console.log(`replay: best of 3 ${best.toFixed(3)} s (runs ${times.map((s) => s.toFixed(3)).join(', ')}); goal under ${GOAL_SECONDS} s`);
  console.log(`total ${result.total}, allow_to_deny ${result.allow_to_deny}, deny_to_allow ${result.deny_to_allow}, by_tool ${result.by_tool.length}, samples ${result.samples.length}`);
  console.log(best < GOAL_SECONDS && result.total === ROWS ? 'PASS' : 'FAIL');
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}

// Policy replay: what a candidate policy would have decided for an agent's
// proxied calls in a window. ClickHouse groups the calls by their decision
// inputs (tool, action, path, MCP request, outcome); the candidate is evaluated
// once per group with the proxy's own evaluator, on the path the proxy matched,
// and the counts are expanded. Calls the policy did not decide keep their
// decision. A candidate's `approve` counts as not forwarded on its own: an
// allowed call it would hold is allow_to_deny (its sample says approve), a denied
// one stays unchanged. POST /policy/replay answers with this; bench/micro/replay.ts times it.
import type { CompiledPolicy, PolicyDecision, RuleVerdict } from '../shared/policy/index.js';
import { REPLAY_SAMPLE_GROUPS, type AuditStore } from '../shared/stores/audit-store.js';
import { mcpCallReading, mcpRequestDecision } from '../shared/mcp.js';
import { currentToolName, normalizePolicyPath } from '../shared/target.js';
import { LoopSlices } from '../shared/loop-slices.js';

/** Changed calls listed, at most. */
const REPLAY_SAMPLES = 100;

export interface ReplayResult {
  total: number;
  unchanged: number;
  allow_to_deny: number;
  deny_to_allow: number;
  by_tool: { tool_name: string; action: string; calls: number; allow_to_deny: number; deny_to_allow: number }[];
  samples: {
    audit_id: string;
    timestamp: string;
    tool_name: string;
    action: string;
    path: string;
    decision: 'allowed' | 'denied';
    would_decision: RuleVerdict;
    would_rule: string;
  }[];
}

export async function replayPolicy(store: AuditStore, orgId: string, agentId: string, since: Date, until: Date, candidate: CompiledPolicy): Promise<ReplayResult> {
  let total = 0;
  let allowToDeny = 0;
  let denyToAllow = 0;
  const byTool = new Map<string, ReplayResult['by_tool'][number]>();
  // The changed groups whose newest call is newest (the samples are the newest
  // changed calls, and the 100 newest are in at most 100 such groups), at most
  // twice the few thousand a sample query names between trims.
  let changed: Changed[] = [];
  const trim = (): void => {
    changed.sort((a, b) => (a.newest < b.newest ? 1 : a.newest > b.newest ? -1 : 0));
    if (changed.length > REPLAY_SAMPLE_GROUPS) changed = changed.slice(0, REPLAY_SAMPLE_GROUPS);
  };
  await store.replayGroups(orgId, agentId, since, until, async (groups) => {
    const slices = new LoopSlices();
    for (let i = 0; i < groups.length; i++) {
      // The candidate may hold 10,000 rules and a part 40,000 groups: minutes of
      // work in one run would hold the event loop, and all-in-one the proxy's
      // calls with it. The loop gets a turn every LOOP_SLICE_MS.
      if ((i & 7) === 7) await slices.turn();
      const group = groups[i]!;
      total += group.calls;
      const toolKey = `${group.toolName}\n${group.action}`;
      let tool = byTool.get(toolKey);
      if (tool === undefined) byTool.set(toolKey, (tool = { tool_name: group.toolName, action: group.action, calls: 0, allow_to_deny: 0, deny_to_allow: 0 }));
      tool.calls += group.calls;
      // Calls another stage decided (SSRF guard, limits, a bad target) keep their decision.
      if (!group.policyDecided) continue;
      // Normalised again even when stored so (idempotent): a row from before raw
      // characters were escaped (2026-11-27) meets a candidate's escaped globs as
      // the proxy would now read its path.
      const path = normalizePolicyPath(group.path) ?? group.path;
      // As the proxy reads it (a resource's URI also normalised); a URI that does not parse (recorded before the proxy refused it) on its own.
      const mcpTool = group.mcpTool === '' ? null : group.mcpTool;
      const mcp = group.mcpMethod === '' ? null : mcpCallReading(group.mcpMethod, mcpTool) ?? { method: group.mcpMethod, tool: mcpTool };
      // As the proxy decides it: names too long for a candidate that searches them are refused unsearched.
      // A tool recorded as an IPv4-mapped address (before 2026-11-29) as its IPv4 address, as the proxy now reads it.
      const would = mcpRequestDecision(candidate, currentToolName(group.toolName), group.action, path, mcp);
      const forwards = would.decision === 'allow';
      if (group.decision === 'allowed' && !forwards) {
        allowToDeny += group.calls;
        tool.allow_to_deny += group.calls;
      } else if (group.decision === 'denied' && forwards) {
        denyToAllow += group.calls;
        tool.deny_to_allow += group.calls;
      } else {
        continue;
      }
      changed.push({ key: group.key, newest: group.newest, would, path });
      if (changed.length >= 2 * REPLAY_SAMPLE_GROUPS) trim();
    }
  });
  trim();
  const wouldOf = new Map(changed.map((c) => [c.key, c]));
  const rows = await store.replaySamples(orgId, agentId, since, until, changed.map((c) => c.key), REPLAY_SAMPLES);
  const samples: ReplayResult['samples'] = [];
  for (const row of rows) {
    const would = wouldOf.get(row.key);
    if (would === undefined) continue; // a row of a changed group always has one; never trust a join blindly
    samples.push({
      audit_id: row.id,
      timestamp: row.timestamp,
      tool_name: row.toolName,
      action: row.action,
      path: would.path,
      decision: row.decision,
      would_decision: would.would.decision,
      would_rule: would.would.ruleMatched,
    });
  }
  return {
    total,
    unchanged: total - allowToDeny - denyToAllow,
    allow_to_deny: allowToDeny,
    deny_to_allow: denyToAllow,
    by_tool: [...byTool.values()].sort((a, b) => b.calls - a.calls || a.tool_name.localeCompare(b.tool_name) || a.action.localeCompare(b.action)),
    samples,
  };
}

/**
 * A changed group: its key for the samples (the samples are matched by it, so
 * its names are not held: up to 4,000 groups whose MCP names, recorded before
 * their bound, may each be a megabyte), its newest call's time, what the
 * candidate decides and on which path.
 */
interface Changed {
  key: string;
  newest: string;
  would: PolicyDecision;
  path: string;
}

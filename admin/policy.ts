// Policies: get and set an agent's YAML policy, and the policy check.
import { GuardError } from '../shared/errors.js';
import { evaluatePolicy, evaluateShadow, matchingLimits, parsePolicy, type PolicyDecision } from '../shared/policy/index.js';
import type { ReplayGroupKey } from '../shared/stores/audit-store.js';
import { normalizePolicyPath } from '../shared/target.js';
import { isoInstant } from './audit.js';
import { policyInputs } from '../shared/target.js';
import type { AdminContext, Handler } from './context.js';
import { json, readJsonObject, stringField } from './http.js';
import { requireAgent } from './agents.js';

export function policyHandlers(ctx: AdminContext) {
  const get: Handler = async (req, caller, params) => {
    const agent = await requireAgent(ctx, caller.orgId, params.id);
    const policy = await ctx.store.getPolicy(agent.id);
    if (/\b(application|text)\/(x-)?yaml\b/i.test(req.headers.accept ?? '')) {
      return {
        status: 200,
        headers: { 'content-type': 'application/yaml; charset=utf-8' },
        body: policy?.rulesYaml ?? '# No policy is set for this agent: every call is allowed.\n',
      };
    }
    return json(200, { agent_id: agent.id, rules_yaml: policy?.rulesYaml ?? null, updated_at: policy?.updatedAt ?? null });
  };

  const set: Handler = async (req, caller, params) => {
    const agent = await requireAgent(ctx, caller.orgId, params.id);
    const rulesYaml = stringField(readJsonObject(req), 'rules_yaml');
    parsePolicy(rulesYaml); // throws invalid_policy naming the line and the problem
    const policy = await ctx.store.setPolicy(agent.id, rulesYaml);
    return json(200, { agent_id: agent.id, rules_yaml: policy.rulesYaml, updated_at: policy.updatedAt });
  };

  const check: Handler = async (req, caller) => {
    const body = readJsonObject(req);
    const agentId = stringField(body, 'agent_id');
    const tool = stringField(body, 'tool', { min: 1, max: 1024 });
    const action = stringField(body, 'action', { min: 1, max: 32 });
    stringField(body, 'reasoning', { max: 65536 });
    // Optional: the target path, for rules that name one. Without it such rules do not match.
    const path = stringField(body, 'path', { optional: true, max: 8192 });
    // Optional: the JSON-RPC request of an MCP call, for rules that name mcp_method / mcp_tool.
    const mcpMethod = stringField(body, 'mcp_method', { optional: true, min: 1, max: 1024 });
    const mcpTool = stringField(body, 'mcp_tool', { optional: true, min: 1, max: 8192 });
    if (mcpTool !== undefined && mcpMethod === undefined) {
      throw new GuardError('invalid_request', "Field 'mcp_tool' needs 'mcp_method' (the request that names the tool).", { field: 'mcp_tool' });
    }
    const mcp = mcpMethod === undefined ? null : { method: mcpMethod, tool: mcpTool ?? null };
    if (path !== undefined && !path.startsWith('/')) {
      throw new GuardError('invalid_request', "Field 'path' must start with '/'.", { field: 'path' });
    }
    const inputs = policyInputs(tool, path);
    if (inputs === 'tool') {
      throw new GuardError('invalid_request', "Field 'tool' must be a host name with an optional :port, as in a proxy URL.", { field: 'tool' });
    }
    if (inputs === 'path') {
      throw new GuardError('invalid_request', "Field 'path' has dot segments (. or ..), which the proxy does not forward.", { field: 'path' });
    }
    // A candidate policy is checked instead of the stored one (it is validated, not stored).
    const candidate = stringField(body, 'rules_yaml', { optional: true });
    const candidatePolicy = candidate === undefined ? undefined : parsePolicy(candidate);
    const agent = await requireAgent(ctx, caller.orgId, agentId);
    let compiled = candidatePolicy ?? null;
    if (candidatePolicy === undefined) {
      const policy = await ctx.store.getPolicy(agent.id);
      compiled = policy ? parsePolicy(policy.rulesYaml) : null;
    }
    const result = evaluatePolicy(compiled, inputs.tool, action.toUpperCase(), inputs.path, mcp);
    // The limits that would count the call if the rules allow it; nothing is counted here.
    const limits = result.decision === 'deny' ? [] : matchingLimits(compiled, inputs.tool, action.toUpperCase(), inputs.path, mcp).map((limit) => ({
      name: limit.name,
      rate: limit.rate,
      burst: limit.burst,
      quota: limit.quota,
      window_seconds: limit.windowMs / 1000,
    }));
    const shadow = evaluateShadow(compiled, inputs.tool, action.toUpperCase(), inputs.path, mcp);
    return json(200, {
      decision: result.decision,
      message: result.message,
      rule_matched: result.ruleMatched,
      shadow_rule: shadow?.name ?? null,
      shadow_decision: shadow?.result.decision ?? null,
      limits,
    });
  };

  /**
   * What a candidate policy would have decided for the agent's proxied calls in
   * a window. ClickHouse groups the calls by their decision inputs; the
   * candidate is evaluated once per group (the proxy's evaluator, on the path
   * the proxy matched) and the counts are expanded.
   */
  const replay: Handler = async (req, caller) => {
    const body = readJsonObject(req);
    const agentId = stringField(body, 'agent_id');
    const candidate = parsePolicy(stringField(body, 'rules_yaml'));
    const sinceRaw = stringField(body, 'since', { optional: true, max: 64 });
    const untilRaw = stringField(body, 'until', { optional: true, max: 64 });
    const until = untilRaw === undefined ? new Date() : new Date(isoInstant(untilRaw, 'until'));
    const since = sinceRaw === undefined ? new Date(until.getTime() - REPLAY_DEFAULT_DAYS * DAY_MS) : new Date(isoInstant(sinceRaw, 'since'));
    const agent = await requireAgent(ctx, caller.orgId, agentId);

    const groups = await ctx.auditStore.replayGroups(caller.orgId, agent.id, since, until);
    let total = 0;
    let allowToDeny = 0;
    let denyToAllow = 0;
    const byTool = new Map<string, { tool_name: string; action: string; calls: number; allow_to_deny: number; deny_to_allow: number }>();
    const changed: ReplayGroupKey[] = [];
    const wouldOf = new Map<string, { decision: PolicyDecision; path: string }>();
    for (const group of groups) {
      total += group.calls;
      const toolKey = `${group.toolName}\n${group.action}`;
      let tool = byTool.get(toolKey);
      if (tool === undefined) byTool.set(toolKey, (tool = { tool_name: group.toolName, action: group.action, calls: 0, allow_to_deny: 0, deny_to_allow: 0 }));
      tool.calls += group.calls;
      // Calls another stage decided (SSRF guard, limits, a bad target) keep their decision.
      if (!group.policyDecided) continue;
      const path = group.normalised ? group.path : normalizePolicyPath(group.path) ?? group.path;
      const mcp = group.mcpMethod === '' ? null : { method: group.mcpMethod, tool: group.mcpTool === '' ? null : group.mcpTool };
      const would = evaluatePolicy(candidate, group.toolName, group.action, path, mcp);
      if (group.decision === 'allowed' && would.decision === 'deny') {
        allowToDeny += group.calls;
        tool.allow_to_deny += group.calls;
      } else if (group.decision === 'denied' && would.decision === 'allow') {
        denyToAllow += group.calls;
        tool.deny_to_allow += group.calls;
      } else {
        continue;
      }
      changed.push({ toolName: group.toolName, action: group.action, path: group.path, mcpMethod: group.mcpMethod, mcpTool: group.mcpTool, decision: group.decision });
      wouldOf.set(replayKey(group), { decision: would, path });
    }
    const samples = (await ctx.auditStore.replaySamples(caller.orgId, agent.id, since, until, changed, REPLAY_SAMPLES)).map((row) => {
      const would = wouldOf.get(replayKey(row))!;
      return {
        audit_id: row.id,
        timestamp: row.timestamp,
        tool_name: row.toolName,
        action: row.action,
        path: would.path,
        decision: row.decision,
        would_decision: would.decision.decision,
        would_rule: would.decision.ruleMatched,
      };
    });
    return json(200, {
      total,
      unchanged: total - allowToDeny - denyToAllow,
      allow_to_deny: allowToDeny,
      deny_to_allow: denyToAllow,
      by_tool: [...byTool.values()].sort((a, b) => b.calls - a.calls || a.tool_name.localeCompare(b.tool_name) || a.action.localeCompare(b.action)),
      samples,
    });
  };

  return { get, set, check, replay };
}

const REPLAY_DEFAULT_DAYS = 7;
const REPLAY_SAMPLES = 100;
const DAY_MS = 86_400_000;

function replayKey(g: ReplayGroupKey): string {
  return `${g.toolName}\n${g.action}\n${g.path}\n${g.mcpMethod}\n${g.mcpTool}\n${g.decision}`;
}

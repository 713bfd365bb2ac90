// Policies: get and set an agent's YAML policy, and the policy check.
import { GuardError } from '../shared/errors.js';
import { evaluateShadow, matchingLimits, POLICY_LIMITS, STORED_POLICY_LIMITS } from '../shared/policy/index.js';
import type { CompiledPolicy, PolicyLimits } from '../shared/policy/index.js';
import { compilePolicy } from '../shared/policy/policy-reader.js';
import { defaultSince, isoInstant } from '../shared/iso-instant.js';
import { mcpCallReading, mcpNamesUnsearched, mcpRequestDecision, MCP_METHOD_MAX_CHARS, MCP_TOOL_MAX_CHARS, MCP_TOOL_METHODS } from '../shared/mcp.js';
import { replayPolicy } from './replay.js';
import { policyInputs, REFUSED_PATH_PARTS } from '../shared/target.js';
import type { AdminContext, Handler } from './context.js';
import type { Caller } from './auth.js';
import type { AdminRequest } from './http.js';
import { json, readJsonObject, stringField } from './http.js';
import { requireAgent } from './agents.js';
import { JOBS_WAITING_MAX, JOBS_WAITING_PER_ORG, OneAtATime } from './one-at-a-time.js';

export function policyHandlers(ctx: AdminContext) {
  const replays = new OneAtATime('policy replays', JOBS_WAITING_MAX, JOBS_WAITING_PER_ORG);
  // A large policy text is read by a worker (policy-reader.ts), one at a time, each org with its share of the places waiting.
  const policyReads = new OneAtATime('policy readings', JOBS_WAITING_MAX, JOBS_WAITING_PER_ORG);
  const compile = (yamlText: string, req: AdminRequest, caller: Caller, limits: PolicyLimits = POLICY_LIMITS): Promise<CompiledPolicy> =>
    compilePolicy(yamlText, limits, (read) => policyReads.run(caller.orgId, read, req.signal));
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
    await compile(rulesYaml, req, caller); // throws invalid_policy naming the line and the problem
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
    // As long as a request the proxy inspects may name (MCP_TOOL_MAX_CHARS).
    const mcpMethod = stringField(body, 'mcp_method', { optional: true, min: 1, max: MCP_METHOD_MAX_CHARS });
    const mcpTool = stringField(body, 'mcp_tool', { optional: true, min: 1, max: MCP_TOOL_MAX_CHARS });
    if (mcpTool !== undefined && mcpMethod === undefined) {
      throw new GuardError('invalid_request', "Field 'mcp_tool' needs 'mcp_method' (the request that names the tool).", { field: 'mcp_tool' });
    }
    if (mcpTool !== undefined && !MCP_TOOL_METHODS.has(mcpMethod!)) {
      throw new GuardError('invalid_request', "Field 'mcp_tool' is read only for tools/call, prompts/get and resources/read: the proxy finds no tool in another method's request.", { field: 'mcp_tool' });
    }
    // Read as the proxy reads it (a resource's URI also normalised); one that does not parse the proxy would not inspect.
    const mcp = mcpMethod === undefined ? null : mcpCallReading(mcpMethod, mcpTool ?? null);
    if (mcpMethod !== undefined && mcp === null) throw new GuardError('invalid_request', "Field 'mcp_tool' is not a URI: the proxy refuses a resources/read whose URI does not parse.", { field: 'mcp_tool' });
    if (path !== undefined && !path.startsWith('/')) {
      throw new GuardError('invalid_request', "Field 'path' must start with '/'.", { field: 'path' });
    }
    const inputs = policyInputs(tool, path);
    if (inputs === 'tool') {
      throw new GuardError('invalid_request', "Field 'tool' must be a host name with an optional :port, as in a proxy URL.", { field: 'tool' });
    }
    if (inputs === 'path') {
      throw new GuardError('invalid_request', `Field 'path' has ${REFUSED_PATH_PARTS}, which the proxy does not forward.`, { field: 'path' });
    }
    // A candidate policy is checked instead of the stored one (it is validated, not stored).
    const candidate = stringField(body, 'rules_yaml', { optional: true });
    const candidatePolicy = candidate === undefined ? undefined : await compile(candidate, req, caller);
    const agent = await requireAgent(ctx, caller.orgId, agentId);
    let compiled = candidatePolicy ?? null;
    if (candidatePolicy === undefined) {
      const policy = await ctx.store.getPolicy(agent.id);
      compiled = policy ? await compile(policy.rulesYaml, req, caller, STORED_POLICY_LIMITS) : null;
    }
    const method = action.toUpperCase();
    // Names too long to search (a resource's URI in three spellings): as the proxy, refused unsearched, and shadow rules see the head.
    const result = mcpRequestDecision(compiled, inputs.tool, method, inputs.path, mcp);
    const unsearched = mcp !== null && compiled !== null && mcpNamesUnsearched(compiled, [mcp]);
    // The limits that would count the call if the rules allow it; nothing is counted here.
    const limits = result.decision === 'deny' ? [] : matchingLimits(compiled, inputs.tool, method, inputs.path, mcp).map((limit) => ({
      name: limit.name,
      rate: limit.rate,
      burst: limit.burst,
      quota: limit.quota,
      window_seconds: limit.windowMs / 1000,
    }));
    const shadow = evaluateShadow(compiled, inputs.tool, method, inputs.path, mcp === null || unsearched ? null : [mcp]);
    return json(200, {
      decision: result.decision,
      message: result.message,
      rule_matched: result.ruleMatched,
      // approve: how long the approval would wait for a person (null for allow and deny).
      approval_timeout: result.decision === 'approve' ? result.approvalTimeoutS : null,
      shadow_rule: shadow?.name ?? null,
      shadow_decision: shadow?.result.decision ?? null,
      limits,
    });
  };

  /** What a candidate policy would have decided for the agent's proxied calls in a window (replay.ts). */
  const replay: Handler = async (req, caller) => {
    const body = readJsonObject(req);
    const agentId = stringField(body, 'agent_id');
    const candidate = await compile(stringField(body, 'rules_yaml'), req, caller);
    const sinceRaw = stringField(body, 'since', { optional: true, max: 64 });
    const untilRaw = stringField(body, 'until', { optional: true, max: 64 });
    const until = untilRaw === undefined ? new Date() : new Date(isoInstant(untilRaw, 'until'));
    const since = sinceRaw === undefined ? defaultSince(until, REPLAY_DEFAULT_DAYS * DAY_MS) : new Date(isoInstant(sinceRaw, 'since'));
    // An empty or inverted window is a mistake, not a replay of nothing (as /audit/seals and /audit/verify refuse it).
    if (since.getTime() >= until.getTime()) throw new GuardError('invalid_request', "Field 'since' must be before 'until'.", { field: 'since' });
    const agent = await requireAgent(ctx, caller.orgId, agentId);
    return json(200, await replays.run(caller.orgId, () => replayPolicy(ctx.auditStore, caller.orgId, agent.id, since, until, candidate), req.signal));
  };

  return { get, set, check, replay };
}

const REPLAY_DEFAULT_DAYS = 7;
const DAY_MS = 86_400_000;

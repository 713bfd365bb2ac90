// Policies: get and set an agent's YAML policy, and the policy check.
import { GuardError } from '../shared/errors.js';
import { evaluatePolicy, matchingLimits, parsePolicy } from '../shared/policy/index.js';
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
    const agent = await requireAgent(ctx, caller.orgId, agentId);
    const policy = await ctx.store.getPolicy(agent.id);
    const compiled = policy ? parsePolicy(policy.rulesYaml) : null;
    const result = evaluatePolicy(compiled, inputs.tool, action.toUpperCase(), inputs.path);
    // The limits that would count the call if the rules allow it; nothing is counted here.
    const limits = result.decision === 'deny' ? [] : matchingLimits(compiled, inputs.tool, action.toUpperCase(), inputs.path).map((limit) => ({
      name: limit.name,
      rate: limit.rate,
      burst: limit.burst,
      quota: limit.quota,
      window_seconds: limit.windowMs / 1000,
    }));
    return json(200, { decision: result.decision, message: result.message, rule_matched: result.ruleMatched, limits });
  };

  return { get, set, check };
}

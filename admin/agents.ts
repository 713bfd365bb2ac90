// Agents: create (the key is shown once), list, proxy-url, delete.
import { isUuid } from '../shared/http.js';
import { GuardError } from '../shared/errors.js';
import { apiKeyPrefix, generateApiKey, hashApiKey } from '../shared/secrets.js';
import { LOG_OUTPUTS, type Agent } from '../shared/types.js';
import type { AdminContext, Handler } from './context.js';
import { enumField, json, noContent, readJsonObject, stringField } from './http.js';

export const AGENT_NAME_MAX = 128;

export function agentJson(agent: Agent) {
  return {
    id: agent.id,
    name: agent.name,
    api_key_prefix: agent.apiKeyPrefix,
    log_outputs: agent.logOutputs,
    created_at: agent.createdAt,
  };
}

/** The agent of the caller's org named by `id`, or 404 (another org's agent is not revealed). */
export async function requireAgent(ctx: AdminContext, orgId: string, id: string | undefined): Promise<Agent> {
  const agent = id !== undefined && isUuid(id) ? await ctx.store.getAgent(orgId, id.toLowerCase()) : undefined;
  if (!agent) throw new GuardError('not_found', 'No agent with that id.');
  return agent;
}

export function agentHandlers(ctx: AdminContext) {
  const proxyBase = (): string => `${ctx.publicUrl()}/proxy/`;

  const create: Handler = async (req, caller) => {
    const body = readJsonObject(req);
    const name = stringField(body, 'name', { min: 1, max: AGENT_NAME_MAX });
    if (name.trim().length === 0) throw new GuardError('invalid_request', "Field 'name' must not be blank.", { field: 'name' });
    const logOutputs = enumField(body, 'log_outputs', LOG_OUTPUTS, 'hash');
    const apiKey = generateApiKey();
    const agent = await ctx.store.createAgent({
      orgId: caller.orgId,
      name,
      logOutputs,
      keyHash: hashApiKey(apiKey),
      apiKeyPrefix: apiKeyPrefix(apiKey),
    });
    return json(201, { ...agentJson(agent), api_key: apiKey, proxy_url: `${proxyBase()}${apiKey}/` });
  };

  const list: Handler = async (_req, caller) => json(200, (await ctx.store.listAgents(caller.orgId)).map(agentJson));

  const proxyUrl: Handler = async (_req, caller, params) => {
    const agent = await requireAgent(ctx, caller.orgId, params.id);
    const url = `${proxyBase()}<API_KEY>/`;
    return json(200, {
      proxy_url: url,
      api_key_prefix: agent.apiKeyPrefix,
      // A ready curl line: replace <API_KEY> with the key shown when the agent was created.
      usage_example: `curl -H 'X-Agent-Reasoning: why this call' -H 'X-Agent-Task-Id: task-1' '${url}api.example.com/v1/items?limit=10'`,
    });
  };

  const remove: Handler = async (_req, caller, params) => {
    const agent = await requireAgent(ctx, caller.orgId, params.id);
    if (!(await ctx.store.deleteAgent(caller.orgId, agent.id))) throw new GuardError('not_found', 'No agent with that id.');
    return noContent();
  };

  return { create, list, proxyUrl, remove };
}

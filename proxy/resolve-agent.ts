// Stage: the agent named by the key in the path, from the cache when warm. It
// runs first, so that every later refusal is audited under the agent's name.
import type { Agent } from '../shared/types.js';
import { NONE, lookupCached, type ProxyCaches } from './caches.js';
import type { ProxyExchange, Stage } from './exchange.js';

export function createResolveAgent(caches: ProxyCaches): Stage {
  return (ex) => lookupCached(caches.agents, ex.keyHash, ex, useAgent);
}

function useAgent(ex: ProxyExchange, agent: Agent | typeof NONE): undefined | false {
  if (agent === NONE) return ex.answerError('invalid_api_key');
  ex.agent = agent;
  return undefined;
}

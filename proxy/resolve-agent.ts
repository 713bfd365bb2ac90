// Stage 1: the agent named by the key in the path, from the cache when warm.
import { NONE, type ProxyCaches } from './caches.js';
import type { ProxyExchange, StageResult } from './exchange.js';
import type { Agent } from '../shared/types.js';

export const API_KEY_RE = /^agk_[0-9A-Za-z]{40}$/;

export function resolveAgent(ex: ProxyExchange, caches: ProxyCaches): StageResult {
  const hit = caches.agents.get(ex.keyHash);
  if (hit !== undefined) {
    caches.stats.agents.hits++;
    return applyAgent(ex, caches, hit);
  }
  if (caches.unknownKeys.has(ex.keyHash)) {
    caches.stats.agents.hits++;
    return ex.answerError('invalid_api_key');
  }
  caches.stats.agents.misses++;
  return caches.agents.fetch(ex.keyHash).then((agent) => applyAgent(ex, caches, agent ?? NONE));
}

function applyAgent(ex: ProxyExchange, caches: ProxyCaches, agent: Agent | typeof NONE): undefined | false {
  if (agent === NONE) {
    caches.agents.delete(ex.keyHash);
    caches.unknownKeys.set(ex.keyHash, true);
    return ex.answerError('invalid_api_key');
  }
  ex.agent = agent;
  return undefined;
}

// Stage: the agent named by the key in the path, from the cache when warm. It
// runs first, so that every later refusal is audited under the agent's name.
import type { Agent } from '../shared/types.js';
import { NONE, lookupCached, type ProxyCaches } from './caches.js';
import { hasUntrustedFraming, refuseFraming } from './admit.js';
import type { ProxyExchange, Stage, StageResult } from './exchange.js';

export function createResolveAgent(caches: ProxyCaches): Stage {
  return (ex) => {
    const result = lookupCached(caches.agents, ex.keyHash, ex, useAgent);
    if (result === undefined || result === false) return result;
    // A read from the store (a cache miss): the call stays in flight until it answers.
    ex.lookingUpAgent = true;
    return result.then(
      (value) => {
        ex.agentLookupSettled();
        return value;
      },
      (err: unknown) => {
        ex.agentLookupSettled();
        throw err;
      },
    );
  };
}

function useAgent(ex: ProxyExchange, agent: Agent | typeof NONE): StageResult {
  if (agent === NONE) {
    // Framing the admit stage would refuse: the answer closes the connection, a
    // turn later, or the bytes after the first Content-Length are served as a
    // next request (an unknown key is refused inside the request handler).
    if (hasUntrustedFraming(ex)) return refuseFraming(ex, 'No agent has this API key.', 'invalid_api_key');
    return ex.answerError('invalid_api_key');
  }
  ex.agent = agent;
  if (ex.finished) {
    // Ended during a lookup from the store (a client that left is audited 499).
    ex.recordLate();
    return false;
  }
  return undefined;
}

// Stage 5: the org's credential for the target authority, added to the forwarded
// call. A client header of the same name is removed first, so it can neither
// override nor duplicate the injected one. Query credentials are appended by
// forward.ts to the upstream path only, never to the audited tool_url.
import { NONE, credentialCacheKey, type InjectedCredential, type ProxyCaches } from './caches.js';
import type { ProxyExchange, StageResult } from './exchange.js';

export function injectCredential(ex: ProxyExchange, caches: ProxyCaches): StageResult {
  const key = credentialCacheKey(ex.agent!.orgId, ex.target!.authority);
  const hit = caches.credentials.get(key);
  if (hit !== undefined) {
    caches.stats.credentials.hits++;
    return apply(ex, hit);
  }
  caches.stats.credentials.misses++;
  return caches.credentials.fetch(key).then((credential) => apply(ex, credential ?? NONE));
}

function apply(ex: ProxyExchange, credential: InjectedCredential | typeof NONE): undefined {
  if (credential === NONE) return undefined;
  ex.credential = credential;
  if (credential.credType !== 'query') {
    const headers = ex.headers;
    for (let i = headers.length - 2; i >= 0; i -= 2) {
      if (headers[i] === credential.name) headers.splice(i, 2);
    }
    headers.push(credential.name, credential.value);
  }
  return undefined;
}

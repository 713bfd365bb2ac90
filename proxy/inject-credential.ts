// Stage: the org's credential for the target authority, added to the forwarded
// call. A client header of the same name is removed first, so it can neither
// override nor duplicate the injected one. Query credentials are appended by
// forward.ts to the upstream path only, never to the audited tool_url.
import { NONE, credentialCacheKey, lookupCached, type InjectedCredential, type ProxyCaches } from './caches.js';
import type { ProxyExchange, Stage } from './exchange.js';

export function createInjectCredential(caches: ProxyCaches): Stage {
  return (ex) => lookupCached(caches.credentials, credentialCacheKey(ex.agent!.orgId, ex.target!.authority), ex, inject);
}

function inject(ex: ProxyExchange, credential: InjectedCredential | typeof NONE): undefined {
  if (credential === NONE) return undefined;
  ex.credential = credential;
  if (credential.credType !== 'query') ex.replaceHeader(credential.name, credential.value);
  return undefined;
}

// Stage (SSRF guard): resolve the target, refuse it when any address it resolves
// to is loopback, private, link-local, CGNAT, multicast, unspecified or otherwise
// not public (unless the allow-list opens it), and pin the address that was
// checked: forward.ts connects to exactly that address, so a resolver that answers
// differently the second time (DNS rebinding) cannot redirect the connection.
import { promises as dns } from 'node:dns';
import { isIP } from 'node:net';
import { LRUCache } from 'lru-cache';
import { entryBound } from '../shared/lru-bound.js';
import { TARGET_FORBIDDEN_RULE } from '../shared/policy/index.js';
import type { ProxyExchange, Stage } from './exchange.js';
import { classifyAddress, createAllowList } from './ssrf-rules.js';

/** Resolved addresses are reused for this long (the pinned address is what was checked). */
export const DNS_CACHE_TTL_MS = 30_000;

interface Resolution {
  addresses: string[];
  error: string | null;
  /** The guard's verdict on these addresses, worked out once (the allow-list is fixed). */
  refusal?: string | null;
}

const MAX_REMEMBERED_LITERALS = 10_000;

export function createGuardTarget(options: { allowTargets: readonly string[]; dnsServer: string | null; dnsCacheTtlMs?: number }): Stage {
  const allowList = createAllowList(options.allowTargets);
  const resolve = createResolver(options.dnsServer);
  const resolutions = new LRUCache<string, Resolution>({
    ...entryBound(10_000),
    ttl: options.dnsCacheTtlMs ?? DNS_CACHE_TTL_MS,
    fetchMethod: async (hostname) => {
      try {
        const addresses = await resolve(hostname);
        return addresses.length > 0 ? { addresses, error: null } : { addresses, error: 'no addresses' };
      } catch (err) {
        return { addresses: [], error: (err as NodeJS.ErrnoException).code ?? 'lookup failed' };
      }
    },
  });

  /** The first refused address's reason, or null when every address may be reached. */
  function refusalOf(hostname: string, addresses: readonly string[]): string | null {
    // A host opened by name is trusted for every address it resolves to.
    if (allowList.allowsHost(hostname)) return null;
    for (const address of addresses) {
      const refusal = classifyAddress(address);
      if (refusal !== null && !allowList.allowsAddress(address)) return refusal;
    }
    return null;
  }

  function check(ex: ProxyExchange, resolution: Resolution): undefined | false {
    const hostname = ex.target!.hostname;
    if (resolution.error !== null) {
      resolutions.delete(hostname); // a failed lookup is not cached
      return ex.answerError('upstream_unreachable', `The target host could not be resolved (${resolution.error}).`, undefined, 'allowed');
    }
    const refusal = resolution.refusal !== undefined ? resolution.refusal : (resolution.refusal = refusalOf(hostname, resolution.addresses));
    if (refusal !== null) {
      ex.ruleMatched = TARGET_FORBIDDEN_RULE;
      return ex.answerError('target_forbidden', `The target resolves to a ${refusal} address, which the proxy does not reach.`);
    }
    ex.addresses = resolution.addresses;
    ex.address = resolution.addresses[0]!;
    return undefined;
  }

  // IP literals need no lookup; their verdicts are remembered, bounded.
  const literals = new Map<string, Resolution>();
  function literal(ip: string): Resolution {
    let resolution = literals.get(ip);
    if (resolution === undefined) {
      if (literals.size >= MAX_REMEMBERED_LITERALS) literals.clear();
      resolution = { addresses: [ip], error: null };
      literals.set(ip, resolution);
    }
    return resolution;
  }

  return (ex) => {
    const hostname = ex.target!.hostname;
    if (isIP(hostname) !== 0) return check(ex, literal(hostname));
    const hit = resolutions.get(hostname);
    if (hit !== undefined) return check(ex, hit);
    return resolutions.fetch(hostname).then((resolution) => check(ex, resolution ?? { addresses: [], error: 'lookup failed' }));
  };
}

/** The system resolver, or (GUARD_DNS_SERVER) a given DNS server asked directly. */
function createResolver(server: string | null): (hostname: string) => Promise<string[]> {
  if (server === null) {
    return async (hostname) => (await dns.lookup(hostname, { all: true, verbatim: true })).map((a) => a.address);
  }
  const resolver = new dns.Resolver({ timeout: 2000, tries: 2 });
  resolver.setServers([server]);
  return async (hostname) => {
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)]);
    const addresses = [...(v4.status === 'fulfilled' ? v4.value : []), ...(v6.status === 'fulfilled' ? v6.value : [])];
    if (addresses.length === 0 && v4.status === 'rejected') throw v4.reason;
    return addresses;
  };
}

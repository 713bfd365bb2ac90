// The proxy's caches: key hash → agent, agent → compiled policy, (org, authority)
// → opened credential. Bounded in entries and age; a warm hit answers without any
// store round-trip. Every change the metadata store reports evicts the entries it
// touches at once, so a delete or a replace takes effect on the next request.
// The three cache stages (resolve-agent, authorize, inject-credential) share one
// lookup, `lookupCached`.
import { LRUCache } from 'lru-cache';
import { entryBound } from '../shared/lru-bound.js';
import { STORED_POLICY_LIMITS, type CompiledPolicy } from '../shared/policy/index.js';
import { compilePolicy } from '../shared/policy/policy-reader.js';
import { credentialAssociatedData, openValue, secretSpellings, WRONG_SECRET_KEY } from '../shared/secrets.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import type { CacheCounters, CacheName } from '../shared/metrics.js';
import type { Agent, CredType, MetadataChange } from '../shared/types.js';
import { hostOfAuthority, withDefaultPort } from '../shared/target.js';
import type { ProxyExchange, StageResult } from './exchange.js';

/** What the proxy injects: the credential's shape and its opened value. */
export interface InjectedCredential {
  credType: CredType;
  /** Lower-cased header name (bearer: 'authorization'), or the query parameter name. */
  name: string;
  /** The header value ('Bearer …' for bearer) or the query pair `param=value`, encoded. */
  value: string;
  /** Every spelling of the secret itself, kept out of the audited output (secretSpellings). */
  spellings: readonly Buffer[];
}

// Absent entries are cached as NONE so that a miss is not a store round-trip too.
export const NONE = 0 as const;
/** The policy lookup's answer for an agent deleted since the agent lookup: its key no longer works. */
export const AGENT_GONE = Object.freeze({ agentGone: true as const });
export type AgentGone = typeof AGENT_GONE;
type Cached<T> = T | typeof NONE;

/** One cache a stage reads through: its entries, its counters, and where absent keys go. */
export interface CachedLookup<V extends object> {
  readonly entries: LRUCache<string, Cached<V>>;
  /** Hits, misses and evictions (the metrics read them). */
  readonly counters: CacheCounters;
  /** Absent keys kept apart, so that a flood of unknown keys cannot evict present ones; null: kept as NONE entries. */
  readonly absent: LRUCache<string, true> | null;
}

/**
 * The cache stages' one lookup: a warm hit (present or absent) calls `use` at
 * once, with no Promise and no closure; a miss fetches from the store (lru-cache
 * joins concurrent fetches of one key) and resumes the pipeline with `use`.
 */
export function lookupCached<V extends object>(
  lookup: CachedLookup<V>,
  key: string,
  ex: ProxyExchange,
  use: (ex: ProxyExchange, value: V | typeof NONE) => StageResult,
): StageResult {
  const hit = lookup.entries.get(key);
  if (hit !== undefined) {
    lookup.counters.hits++;
    return use(ex, hit === NONE ? absent(lookup, key) : hit);
  }
  if (lookup.absent !== null && lookup.absent.has(key)) {
    lookup.counters.hits++;
    return use(ex, NONE);
  }
  lookup.counters.misses++;
  return fetchAgain(lookup, key, ex, use, FETCH_ATTEMPTS);
}

/** Reads of one key a call makes at most, when changes keep evicting it while it is read. */
const FETCH_ATTEMPTS = 8;

function fetchAgain<V extends object>(lookup: CachedLookup<V>, key: string, ex: ProxyExchange, use: (ex: ProxyExchange, value: V | typeof NONE) => StageResult, attempts: number): Promise<undefined | false> {
  return lookup.entries.fetch(key).then(
    (value) => use(ex, value === undefined || value === NONE ? absent(lookup, key) : value),
    (err: unknown) => {
      // A change evicted the key while it was read (lru-cache aborts the fetch:
      // 'deleted', 'replaced', 'evicted'): read it again, now after the change,
      // instead of failing the call with 500; again after a second change too.
      if (!isFetchAbort(err) || attempts <= 1) throw err;
      return fetchAgain(lookup, key, ex, use, attempts - 1);
    },
  );
}

const FETCH_ABORTS: ReadonlySet<string> = new Set(['deleted', 'replaced', 'evicted']);

function isFetchAbort(err: unknown): boolean {
  return err instanceof Error && FETCH_ABORTS.has(err.message);
}

function absent<V extends object>(lookup: CachedLookup<V>, key: string): typeof NONE {
  if (lookup.absent !== null) {
    lookup.entries.delete(key);
    lookup.absent.set(key, true);
  }
  return NONE;
}

export interface ProxyCaches {
  agents: CachedLookup<Agent>;
  policies: CachedLookup<CompiledPolicy | typeof AGENT_GONE>;
  credentials: CachedLookup<InjectedCredential>;
  /** Changes of any agent's policy (or an agent's deletion, or a reset of the feed) heard so far. */
  readonly policyChanges: number;
  /** Evicts what a change touches. */
  apply(change: MetadataChange): void;
  /** Evicts everything (a change feed that lost its place). */
  clear(): void;
  /** Stop listening to the store's changes. */
  close(): void;
}

export function credentialCacheKey(orgId: string, authority: string): string {
  return `${orgId}|${authority}`;
}

export function createProxyCaches(
  store: MetadataStore,
  encryptionKey: Buffer,
  options: { maxEntries: number; ttlMs: number; stats: Record<CacheName, CacheCounters> },
): ProxyCaches {
  const { stats } = options;
  const common = { ...entryBound(options.maxEntries), ttl: options.ttlMs, ttlAutopurge: false, updateAgeOnGet: false };
  const countEvictions = (name: CacheName) => (_value: unknown, _key: string, reason: string) => {
    if (reason === 'evict') stats[name].evictions++;
  };

  const agents = new LRUCache<string, Cached<Agent>>({
    ...common,
    dispose: countEvictions('agents'),
    fetchMethod: async (keyHash) => (await store.findAgentByKeyHash(keyHash)) ?? NONE,
  });
  const unknownKeys = new LRUCache<string, true>({ ...entryBound(Math.min(options.maxEntries, 10_000)), ttl: options.ttlMs });
  const policies = new LRUCache<string, Cached<CompiledPolicy | typeof AGENT_GONE>>({
    ...common,
    dispose: countEvictions('policies'),
    fetchMethod: async (agentId) => {
      const record = await store.getPolicy(agentId);
      if (record) return compilePolicy(record.rulesYaml, STORED_POLICY_LIMITS);
      // No policy lets every call pass; a deleted agent has none either. Split
      // mode: a proxy that still holds the agent (its deletion not heard yet)
      // but no longer its policy (a change evicted it) let the deleted agent
      // call anything, its deny-all policy gone with it. Asked on a miss only.
      return (await store.agentExists(agentId)) ? NONE : AGENT_GONE;
    },
  });
  /**
   * Credential keys being read from the store, with how many reads: lru-cache's
   * keys() leaves them out, a change must reach them too. Counted, not a set: an
   * aborted read still awaiting the store overlaps the read that replaces it, and
   * the first to end must not take the key out from under the other.
   */
  const credentialsRead = new Map<string, number>();
  const credentials = new LRUCache<string, Cached<InjectedCredential>>({
    ...common,
    dispose: countEvictions('credentials'),
    fetchMethod: async (key) => {
      const split = key.indexOf('|');
      const orgId = key.slice(0, split);
      const authority = key.slice(split + 1);
      credentialsRead.set(key, (credentialsRead.get(key) ?? 0) + 1);
      let sealed;
      try {
        sealed = await store.findCredentialForHost(orgId, authority);
      } finally {
        const reads = credentialsRead.get(key)! - 1;
        if (reads === 0) credentialsRead.delete(key);
        else credentialsRead.set(key, reads);
      }
      if (!sealed) return NONE;
      let value: string;
      try {
        value = openValue(encryptionKey, sealed.sealedValue, credentialAssociatedData(orgId, sealed.hostname));
      } catch (err) {
        // Stored by a process with another key (split mode: the admin's differs): logged as such, not as the cipher's words.
        throw new Error(`the credential for ${sealed.hostname} cannot be opened: ${WRONG_SECRET_KEY}`, { cause: err });
      }
      const spellings = secretSpellings(value);
      switch (sealed.credType) {
        case 'bearer':
          return { credType: 'bearer', name: 'authorization', value: `Bearer ${value}`, spellings };
        case 'header': // matched against the request's (lower-cased) header names
          return { credType: 'header', name: (sealed.headerName ?? sealed.name).toLowerCase(), value, spellings };
        case 'query': {
          const param = sealed.queryParam ?? sealed.name;
          return { credType: 'query', name: param, value: `${encodeURIComponent(param)}=${encodeURIComponent(value)}`, spellings };
        }
      }
    },
  });

  let policyChanges = 0;

  function apply(change: MetadataChange): void {
    switch (change.kind) {
      case 'agent':
        agents.delete(change.keyHash);
        policies.delete(change.agentId);
        policyChanges++;
        break;
      case 'policy':
        policies.delete(change.agentId);
        policyChanges++;
        break;
      case 'credential': {
        const key = credentialCacheKey(change.orgId, change.hostname);
        credentials.delete(key);
        const host = hostOfAuthority(change.hostname);
        // One for port 443 answers for targets that leave that port unwritten (their key has none).
        if (host !== change.hostname && withDefaultPort(host) === change.hostname) credentials.delete(credentialCacheKey(change.orgId, host));
        // A credential without a port also answers for the host's other ports.
        if (host === change.hostname) {
          const ported = `${key}:`;
          // Those being read too (their read is aborted and done again, lookupCached): else one read before the change lands would be cached for CACHE_TTL_MS.
          for (const cached of [...credentials.keys(), ...credentialsRead.keys()].filter((k) => k.startsWith(ported))) credentials.delete(cached);
        }
        break;
      }
    }
  }

  function clear(): void {
    policyChanges++;
    agents.clear();
    unknownKeys.clear();
    policies.clear();
    credentials.clear();
  }

  const unsubscribe = store.changes.subscribe({ apply, clear });
  return {
    agents: { entries: agents, counters: stats.agents, absent: unknownKeys },
    policies: { entries: policies, counters: stats.policies, absent: null },
    credentials: { entries: credentials, counters: stats.credentials, absent: null },
    get policyChanges() {
      return policyChanges;
    },
    apply,
    clear,
    close: unsubscribe,
  };
}

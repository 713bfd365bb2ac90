// The agent behind a call's API key: the key's hash (shared/secrets.ts
// hashApiKey, through exchange.ts readProxyPath) and the warm lookup of the
// resolve-agent stage (proxy/caches.ts lookupCached), over the proxy's own
// caches in front of a real SQLite metadata store in a temp dir.
// `node dist/bench/micro/key-lookup.js`.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createProxyCaches } from '../../proxy/caches.js';
import { createResolveAgent } from '../../proxy/resolve-agent.js';
import { loadConfig } from '../../shared/config.js';
import { Metrics } from '../../shared/metrics.js';
import { generateApiKey, hashApiKey } from '../../shared/secrets.js';
import { openMetadataStore } from '../../shared/stores/open-stores.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';
import { socketlessExchange } from './socketless-exchange.js';

export const measureKeyLookup: MicroCases = async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-micro-keys-'));
  const config = loadConfig({ DATA_DIR: dir });
  const store = await openMetadataStore(config);
  // The proxy's caches as the pipeline makes them: CACHE_MAX_ENTRIES (100,000) and CACHE_TTL_MS by default.
  const caches = createProxyCaches(store, Buffer.alloc(32, 7), { maxEntries: config.cacheMaxEntries, ttlMs: config.cacheTtlMs, stats: new Metrics({ agentLabel: false }).caches });
  try {
    const user = await store.createUserWithOrg('bench@example.com', 'not a password hash');
    const key = generateApiKey();
    const agent = await store.createAgent({ orgId: user.orgId, name: 'bench-agent', logOutputs: 'none', keyHash: hashApiKey(key), apiKeyPrefix: key.slice(0, 12) });
    const resolveAgent = createResolveAgent(caches);
    const ex = socketlessExchange();
    const proxyPath = `/proxy/${key}/api.github.com/repos/acme/widgets/issues`;
    ex.readProxyPath(proxyPath);
    await resolveAgent(ex); // the miss: read from the store, then cached
    if (ex.agent?.id !== agent.id) throw new Error('the agent was not resolved from the store');
    const warm = (): void => {
      if (resolveAgent(ex) !== undefined) throw new Error('a warm lookup did not answer at once');
    };
    warm();
    const results = [
      measure('hashApiKey (agk_ + 40 base62 characters, SHA-256 hex)', () => hashApiKey(key)),
      measure('readProxyPath (the key\'s shape checked, hashed; the target split off)', () => ex.readProxyPath(proxyPath)),
      measure('resolve-agent, warm (lookupCached, a cache of 1 agent)', warm),
    ];

    // The cache full (CACHE_MAX_ENTRIES), each call the next agent in a spread-out order.
    // The keys looked up are the cached strings themselves; the proxy's is a new string
    // each call (hashApiKey's), whose hash the Map computes first (not measured here).
    const keyHashes = [ex.keyHash];
    for (let n = 1; n < config.cacheMaxEntries; n++) {
      const otherKey = generateApiKey();
      const keyHash = hashApiKey(otherKey);
      caches.agents.entries.set(keyHash, { ...agent, id: randomUUID(), name: `agent-${n}`, apiKeyPrefix: otherKey.slice(0, 12) });
      keyHashes.push(keyHash);
    }
    const count = keyHashes.length;
    results.push(measure(`resolve-agent, warm (lookupCached, a cache of ${count.toLocaleString('en-US')} agents, a different one each call)`, (i) => {
      ex.keyHash = keyHashes[(i * 7919) % count]!;
      warm();
    }));
    if (caches.agents.counters.misses !== 1) throw new Error(`the warm lookups missed ${caches.agents.counters.misses - 1} times`);
    return results;
  } finally {
    caches.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
};

runWhenMain(import.meta.url, measureKeyLookup);

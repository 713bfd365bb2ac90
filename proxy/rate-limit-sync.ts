// Split mode: the rate limiter's counts shared through the metadata store. A
// timer (never a proxied call) adds this proxy's new counts and reads back the
// totals that changed; the limiter decides from memory in between. When the
// store cannot be reached, the counts wait for the next sync and the proxy goes
// on with what it knew (docs/api.md "Rate limits" states the bound).
import { randomUUID } from 'node:crypto';
import type { Logger } from '../shared/log.js';
import type { RateLimitStats } from '../shared/metrics.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import type { RateLimiter } from './rate-limiter.js';

/** Rows changed this long before the last read are read again: clocks of several machines differ a little. */
const READ_OVERLAP_MS = 5_000;
/** How long stop() waits for the last sync. */
const STOP_DEADLINE_MS = 2_000;
/** Failures are logged at most this often. */
const LOG_EVERY_MS = 30_000;

export interface RateLimitSync {
  stats(): RateLimitStats;
  /** Stops the timer after a last push of the counts. */
  stop(): Promise<void>;
}

export function startRateLimitSync(deps: { limiter: RateLimiter; store: MetadataStore; syncMs: number; log: Logger }): RateLimitSync {
  const { limiter, store, syncMs, log } = deps;
  const nodeId = randomUUID();
  // A proxy that missed a few syncs still counts as live (its share stays reserved).
  const liveMs = Math.max(5 * syncMs, 2_000);
  let readSince = 0;
  let reachable = 1;
  let failures = 0;
  let nodes = 1;
  let loggedAt = Number.NEGATIVE_INFINITY;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let stopped = false;
  limiter.startSyncing(syncMs, liveMs);

  async function syncOnce(): Promise<void> {
    const now = Date.now();
    const add = limiter.takeAdmitted();
    try {
      const result = await store.syncRateCounts({ node_id: nodeId, now, live_after: now - liveMs, add, changed_since: readSince });
      limiter.applySync(result.nodes, nodeId, result.rows);
      readSince = now - READ_OVERLAP_MS;
      nodes = Math.max(1, result.nodes.length);
      reachable = 1;
    } catch (err) {
      limiter.returnAdmitted(add);
      failures++;
      reachable = 0;
      if (now - loggedAt >= LOG_EVERY_MS) {
        loggedAt = now;
        log.warn('rate limits cannot be shared: the metadata store does not answer; this proxy counts with what it last knew', { err });
      }
    }
  }

  function schedule(): void {
    if (stopped) return;
    timer = setTimeout(() => {
      running = syncOnce().finally(() => {
        running = null;
        schedule();
      });
    }, syncMs);
    timer.unref();
  }
  running = syncOnce().finally(() => {
    running = null;
    schedule();
  });

  return {
    stats: () => ({ counters: limiter.size, storeReachable: reachable, syncFailures: failures, proxies: nodes }),
    async stop() {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      // A store that hangs must not hold shutdown: the last counts are given at most this long.
      const deadline = new Promise<void>((resolve) => setTimeout(resolve, STOP_DEADLINE_MS).unref());
      await Promise.race([running ?? Promise.resolve(), deadline]);
      await Promise.race([syncOnce(), deadline]);
    },
  };
}

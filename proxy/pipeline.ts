// The proxy's stages, one array in the order a request meets them, run
// synchronously while every cache is warm and resumed after a Promise only when
// a stage had to wait (a cache miss, DNS, the rest of a small body). Each
// finished exchange goes to the record stage. docs/lifecycle.md draws it.
import type { AuditBatcher } from '../shared/audit/audit-batcher.js';
import type { Config } from '../shared/config.js';
import { isStoreUnavailable } from '../shared/errors.js';
import { FIELD, type Logger } from '../shared/log.js';
import type { ApprovalStats, Metrics, RateLimitStats } from '../shared/metrics.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import { createAdmit } from './admit.js';
import { endCallsOfDeletedAgents } from './agent-deletions.js';
import { ApprovalWebhook } from './approval-webhook.js';
import { createAuthorize } from './authorize.js';
import { createProxyCaches, type ProxyCaches } from './caches.js';
import type { ProxyExchange, Stage, StageResult } from './exchange.js';
import { createForward } from './forward.js';
import { createGuardTarget } from './guard-target.js';
import { createHeldCalls } from './hold.js';
import { createInjectCredential } from './inject-credential.js';
import { InFlight } from './in-flight.js';
import { createInspectMcp } from './inspect-mcp.js';
import { createLimit } from './limit.js';
import { startRateLimitSync, type RateLimitSync } from './rate-limit-sync.js';
import { RateLimiter } from './rate-limiter.js';
import { createParseTarget } from './parse-target.js';
import { createRecordAudit } from './record-audit.js';
import { createResolveAgent } from './resolve-agent.js';
import { createUpstreamPools } from './upstream-pools.js';

/** How often idle rate-limit counters are dropped. */
const RATE_SWEEP_MS = 10_000;

export interface ProxyPipeline {
  /** Runs a call whose head has been read (and whose key is well-formed). */
  run(ex: ProxyExchange): void;
  caches: ProxyCaches;
  /** Exchanges started and not yet finished. */
  readonly inFlight: number;
  /** Exchanges finished with a known agent, i.e. audit records queued. */
  readonly audited: number;
  /**
   * Shutdown has begun: calls that arrive now (on connections kept alive) are
   * answered 503 with Connection: close and audited, so that the drain ends and
   * no record arrives after the audit pipeline closed.
   */
  stopAdmitting(): void;
  /** Past the drain deadline: ends every call still in flight (ProxyExchange.endForShutdown). */
  endInFlight(): void;
  /** The rate limiter's state, for /metrics. */
  rateLimits(): RateLimitStats;
  /** Held calls and the approval webhook, for /metrics. */
  approvals(): ApprovalStats;
  close(): Promise<void>;
}

export function createProxyPipeline(deps: {
  config: Readonly<Config>;
  store: MetadataStore;
  encryptionKey: Buffer;
  batcher: AuditBatcher;
  log: Logger;
  metrics: Metrics;
  /** Share rate-limit counts with other proxies through the store (split mode, MongoDB). */
  shareRateLimits: boolean;
  /** PUBLIC_URL, or the local origin once the listener knows its port: the 202's Location, the webhook's approve_url. */
  publicUrl: () => string;
}): ProxyPipeline {
  const { config, batcher, log, metrics } = deps;
  const caches = createProxyCaches(deps.store, deps.encryptionKey, { maxEntries: config.cacheMaxEntries, ttlMs: config.cacheTtlMs, stats: metrics.caches });
  const pools = createUpstreamPools(config);
  let audited = 0;
  let admitting = true;
  const limiter = new RateLimiter({ maxCounters: config.rateLimitMaxCounters });
  const rateSync: RateLimitSync | null = deps.shareRateLimits && config.rateLimitSyncMs > 0
    ? startRateLimitSync({ limiter, store: deps.store, syncMs: config.rateLimitSyncMs, log })
    : null;
  // Idle counters (every slot out of the window) are dropped in the background.
  const sweeper = setInterval(() => limiter.sweep(), RATE_SWEEP_MS);
  sweeper.unref();
  const webhook = config.approvalWebhookUrl !== null && config.approvalWebhookSecret !== null
    ? new ApprovalWebhook({ url: config.approvalWebhookUrl, secret: config.approvalWebhookSecret, publicUrl: deps.publicUrl, log })
    : null;
  const { hold, claim, ended: holdEnded, held } = createHeldCalls({ store: deps.store, holdS: config.approvalHoldS, policyChanges: () => caches.policyChanges, maxPending: config.approvalMaxPending, metrics: config.metricsEnabled ? metrics : null, publicUrl: deps.publicUrl, webhook, log });

  /** The approval's claim; an approved retry it refuses never goes upstream, so the limits take it back. */
  function claimOrRefund(ex: ProxyExchange): StageResult {
    const claimed = claim(ex);
    if (ex.rateCharge === null || claimed === undefined) return claimed;
    return Promise.resolve(claimed).then(
      (result) => {
        if (result === false) limiter.refund(ex.rateCharge!);
        return result;
      },
      (err: unknown) => {
        // The claim failed on the store (answered 503 by the pipeline): nothing went upstream either.
        limiter.refund(ex.rateCharge!);
        throw err;
      },
    );
  }

  // A refusal of an overfull audit pipeline goes without a record: counted in
  // /metrics, and said in a warning at most once a minute with how many.
  let unrecordedSinceWarning = 0;
  let warnedAt = -Infinity;
  function unrecorded(): void {
    batcher.stats.refusalsUnrecorded += 1;
    unrecordedSinceWarning += 1;
    const now = performance.now();
    if (now - warnedAt < 60_000) return;
    log.warn('audit pipeline overfull: calls refused without an audit record', { refusals: unrecordedSinceWarning });
    unrecordedSinceWarning = 0;
    warnedAt = now;
  }

  // The agent is resolved first, so that every refusal after it is audited.
  const stages: readonly Stage[] = [
    createResolveAgent(caches),
    createAdmit({ admitting: () => admitting, saturated: () => batcher.saturated, overfull: () => batcher.overfull, unrecorded }),
    createParseTarget(),
    createAuthorize(caches),
    createInspectMcp(),
    createGuardTarget({ allowTargets: config.allowTargets, dnsServer: config.dnsServer, dnsCacheTtlMs: config.dnsCacheTtlMs }),
    hold,
    createInjectCredential(caches),
    createLimit({ limiter, metrics: config.metricsEnabled ? metrics : null }),
    claimOrRefund,
    createForward({ config, pools }),
  ];
  const record = createRecordAudit({
    batcher,
    log,
    metrics: config.metricsEnabled ? metrics : null,
    logSample: config.logRequestSample,
    onRecorded: () => {
      audited++;
    },
  });

  /** Exchanges started and not yet done (shutdown ends what is left of them). */
  const running = new InFlight();
  const stopEndingDeleted = endCallsOfDeletedAgents({ store: deps.store, running, log });

  /**
   * The record, queued before the answer's last bytes. A failure to queue it is
   * logged, not thrown: the answer still goes (the exchange sends it at once).
   */
  function onFinish(ex: ProxyExchange): boolean {
    if (ex.claimed) holdEnded(ex);
    try {
      return record(ex);
    } catch (err) {
      log.error('an audit record could not be queued', { [FIELD.requestId]: ex.requestId || ex.id, [FIELD.err]: err });
      return false;
    }
  }

  /** Over: shutdown's drain waits for what is still in `running`, a last chunk held back by a slow client included. */
  function onDone(ex: ProxyExchange): void {
    running.delete(ex);
  }

  /** An answer's last send waits for the journal write of the turn (audit-journal.ts). */
  function waitForJournal(ex: ProxyExchange): void {
    batcher.afterJournaled(ex);
  }

  function fail(ex: ProxyExchange, err: unknown): void {
    const storeDown = isStoreUnavailable(err);
    if (storeDown) metrics.storeErrors++;
    log.error('proxy stage failed', { [FIELD.requestId]: ex.requestId || ex.id, [FIELD.keyPrefix]: ex.keyPrefix, [FIELD.err]: err });
    ex.answerError(storeDown ? 'unavailable' : 'internal');
  }

  function runFrom(ex: ProxyExchange, first: number): void {
    for (let i = first; i < stages.length; i++) {
      if (ex.finished) return;
      let result: StageResult;
      try {
        result = stages[i]!(ex);
      } catch (err) {
        fail(ex, err);
        return;
      }
      if (result === false) return;
      if (result !== undefined) {
        const next = i + 1;
        result.then(
          (value) => {
            if (value !== false) runFrom(ex, next);
          },
          (err: unknown) => fail(ex, err),
        );
        return;
      }
    }
  }

  return {
    caches,
    get inFlight() {
      return running.size;
    },
    get audited() {
      return audited;
    },
    stopAdmitting() {
      admitting = false;
      // Held calls are answered 202 now, not at the drain deadline: their approvals stay pending for the retry.
      held.releaseAll();
    },
    endInFlight() {
      for (const ex of running.list()) ex.endForShutdown();
    },
    approvals() {
      return { held: held.size, created: held.created, webhookDelivered: webhook?.stats.delivered ?? 0, webhookFailures: webhook?.stats.failures ?? 0, webhookDropped: webhook?.stats.dropped ?? 0 };
    },
    rateLimits() {
      return rateSync?.stats() ?? { counters: limiter.size, storeReachable: 1, syncFailures: 0, proxies: 1 };
    },
    run(ex) {
      running.add(ex);
      ex.onFinish = onFinish;
      ex.onDone = onDone;
      ex.waitForJournal = waitForJournal;
      runFrom(ex, 0);
    },
    async close() {
      clearInterval(sweeper);
      stopEndingDeleted();
      held.close();
      webhook?.close();
      await rateSync?.stop();
      caches.close();
      await pools.close();
    },
  };
}

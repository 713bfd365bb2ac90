// The proxy's stages wired in order, run synchronously while every cache is warm
// and resumed after a Promise only when a stage had to wait (a cache miss, DNS,
// the rest of a small body). Each finished exchange whose agent is known becomes
// one audit record.
import type { AuditBatcher } from '../shared/audit/audit-batcher.js';
import type { Config } from '../shared/config.js';
import { isStoreUnavailable } from '../shared/errors.js';
import { FIELD, type Logger } from '../shared/log.js';
import type { Metrics } from '../shared/metrics.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import { authorize } from './authorize.js';
import { createProxyCaches, type ProxyCaches } from './caches.js';
import type { ProxyExchange, StageResult } from './exchange.js';
import { createForwarder } from './forward.js';
import { createTargetGuard } from './guard-target.js';
import { injectCredential } from './inject-credential.js';
import { checkRequest } from './parse-target.js';
import { resolveAgent } from './resolve-agent.js';

type Stage = (ex: ProxyExchange) => StageResult;

export interface ProxyPipeline {
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
  close(): Promise<void>;
}

export function createProxyPipeline(deps: {
  config: Readonly<Config>;
  store: MetadataStore;
  encryptionKey: Buffer;
  batcher: AuditBatcher;
  log: Logger;
  metrics: Metrics;
}): ProxyPipeline {
  const { config, batcher, log, metrics } = deps;
  const caches = createProxyCaches(deps.store, deps.encryptionKey, { maxEntries: config.cacheMaxEntries, ttlMs: config.cacheTtlMs, stats: metrics.caches });
  const sample = config.logRequestSample;
  const guard = createTargetGuard({ allowTargets: config.allowTargets, dnsServer: config.dnsServer, dnsCacheTtlMs: config.dnsCacheTtlMs });
  const forwarder = createForwarder(config);
  let inFlight = 0;
  let audited = 0;
  let admitting = true;

  const stages: Stage[] = [
    (ex) => resolveAgent(ex, caches),
    (ex) => (admitting ? undefined : ex.answerError('unavailable', 'The service is shutting down; retry.', undefined, 'denied', true)),
    (ex) => checkRequest(ex, batcher),
    (ex) => authorize(ex, caches),
    (ex) => guard.guard(ex),
    (ex) => injectCredential(ex, caches),
    (ex) => forwarder.forward(ex),
  ];

  const counting = config.metricsEnabled;

  function onFinish(ex: ProxyExchange): void {
    inFlight--;
    if (counting) {
      metrics.totalLatency.observe((performance.now() - ex.startedAt) / 1000);
      if (ex.upstreamMs >= 0) metrics.upstreamLatency.observe(ex.upstreamMs / 1000);
      metrics.bytesOut += ex.responseBytes;
      if (ex.body !== null) metrics.bytesIn += ex.body.received;
      metrics.recordProxied(ex.auditDecision, ex.method, ex.aborted ? 499 : ex.statusCode, ex.agent?.id ?? null);
    }
    if (ex.agent === null) return;
    const record = ex.toAuditRecord();
    batcher.enqueue(record);
    audited++;
    // One canonical line per call: at info for a sampled share, else at debug.
    const atInfo = sample > 0 && Math.random() < sample;
    if (atInfo || log.isLevelEnabled('debug')) {
      (atInfo ? log.info : log.debug)('proxied', {
        [FIELD.requestId]: record.requestId,
        [FIELD.agentId]: record.agentId,
        [FIELD.keyPrefix]: ex.keyPrefix,
        [FIELD.method]: record.action,
        [FIELD.tool]: record.toolName,
        [FIELD.path]: ex.target?.path ?? '',
        [FIELD.status]: record.statusCode,
        [FIELD.decision]: record.decision,
        [FIELD.rule]: record.ruleMatched,
        [FIELD.latencyMs]: record.latencyMs,
        [FIELD.upstreamMs]: ex.upstreamMs >= 0 ? Math.round(ex.upstreamMs) : null,
        [FIELD.requestBytes]: record.requestBytes,
        [FIELD.responseBytes]: record.responseBytes,
      });
    }
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
      return inFlight;
    },
    get audited() {
      return audited;
    },
    stopAdmitting() {
      admitting = false;
    },
    run(ex) {
      inFlight++;
      ex.onFinish = onFinish;
      runFrom(ex, 0);
    },
    async close() {
      caches.close();
      await forwarder.close();
    },
  };
}

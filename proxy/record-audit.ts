// The last stage: a finished exchange is counted, and becomes one audit record
// (when its agent is known) and, for a sampled share, one canonical log line.
// It runs once per exchange, from ProxyExchange.finish() or, before the answer's
// last bytes, from sendLast, and says whether it queued a record.
import type { AuditBatcher } from '../shared/audit/audit-batcher.js';
import { FIELD, type Logger } from '../shared/log.js';
import type { Metrics } from '../shared/metrics.js';
import type { ProxyExchange } from './exchange.js';

export function createRecordAudit(deps: {
  batcher: AuditBatcher;
  log: Logger;
  /** Null when METRICS_ENABLED is off: nothing is counted. */
  metrics: Metrics | null;
  /** LOG_REQUEST_SAMPLE: the share of calls logged at info (the rest at debug). */
  logSample: number;
  /** Called once a record is queued. */
  onRecorded: () => void;
}): (ex: ProxyExchange) => boolean {
  const { batcher, log, metrics, logSample } = deps;
  return (ex) => {
    if (metrics !== null && !ex.recordingLate) {
      metrics.totalLatency.observe((performance.now() - ex.startedAt) / 1000);
      if (ex.upstreamMs >= 0) metrics.upstreamLatency.observe(ex.upstreamMs / 1000);
      metrics.bytesOut += ex.responseBytes;
      if (ex.body !== null) metrics.bytesIn += ex.body.received;
      metrics.recordProxied(ex.auditDecision, ex.method, ex.aborted ? 499 : ex.statusCode, ex.agent?.id ?? null);
    }
    // No agent, no record; a held call answered 202 (still pending) has none either (the contract).
    if (ex.agent === null || ex.unaudited) return false;
    const record = ex.toAuditRecord();
    batcher.enqueue(record);
    deps.onRecorded();
    // One canonical line per call: at info for a sampled share, else at debug.
    const atInfo = logSample > 0 && Math.random() < logSample;
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
    return true;
  };
}

// Prometheus metrics (prom-client). The hot path only bumps plain numbers and
// observes two label-free histograms; counters are read into prom-client when
// /metrics is scraped, so a proxied call pays no label hashing. No label carries
// an agent key, a secret, a URL or any other unbounded value; the agent id is a
// label only when METRICS_AGENT_LABEL is on (one series per agent).
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { PROXY_METHODS } from './http.js';
import type { AuditDecision } from './types.js';

const METHODS = [...PROXY_METHODS, 'other'] as const;
const DECISIONS: readonly AuditDecision[] = ['allowed', 'denied'];
const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const;
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export type CacheName = 'agents' | 'policies' | 'credentials';

/**
 * A label-less histogram counted in a typed array on the hot path and handed to
 * prom-client only when /metrics is read, as the counters above are:
 * prom-client's observe() builds a closure, a label object and a hash per call
 * (~0.4 µs; two a proxied call). The exposition is prom-client's own (a test
 * compares the two texts).
 */
export class FastHistogram {
  readonly #bounds: readonly number[];
  /** Observations per bucket (not cumulative); the last slot is above every bound. */
  readonly #counts: Float64Array;
  #sum = 0;
  #count = 0;

  constructor(config: { name: string; help: string; buckets: readonly number[]; registers: Registry[] }) {
    this.#bounds = [...config.buckets].sort((a, b) => a - b);
    this.#counts = new Float64Array(this.#bounds.length + 1);
    const self = this;
    new Histogram({
      name: config.name,
      help: config.help,
      buckets: [...this.#bounds],
      registers: config.registers,
      collect() {
        this.reset();
        this.zero({});
        const entry = Object.values((this as unknown as { hashMap: Record<string, { bucketValues: Record<number, number>; sum: number; count: number }> }).hashMap)[0]!;
        for (let i = 0; i < self.#bounds.length; i++) entry.bucketValues[self.#bounds[i]!] = self.#counts[i]!;
        entry.sum = self.#sum;
        entry.count = self.#count;
      },
    });
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) return;
    const bounds = this.#bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.#counts[i]! += 1;
    this.#sum += value;
    this.#count += 1;
  }
}

export interface CacheCounters {
  hits: number;
  misses: number;
  evictions: number;
}

/** Numbers a source (the batcher, the pipeline) exposes for scraping. */
export interface MetricSources {
  auditStats(): { queued: number; written: number; spooled: number; replayed: number; failedAttempts: number; pending: number; spooledBatches: number; refusalsUnrecorded: number };
  inFlight(): number;
  /** The rate limiter's state (absent where no proxy runs). */
  rateLimits?(): RateLimitStats;
  /** Held calls and the approval webhook (absent where no proxy runs). */
  approvals?(): ApprovalStats;
}

export interface ApprovalStats {
  /** Calls held open now, waiting for a decision. */
  held: number;
  /** Approvals this process created. */
  created: number;
  webhookDelivered: number;
  /** Attempts that failed (each retry counts). */
  webhookFailures: number;
  /** Notifications given up on (out of attempts, or the queue full). */
  webhookDropped: number;
}

/** A process without a proxy: nothing held, nothing sent. */
export const NO_APPROVALS: ApprovalStats = { held: 0, created: 0, webhookDelivered: 0, webhookFailures: 0, webhookDropped: 0 };

export interface RateLimitStats {
  counters: number;
  /** 1 while the last sync reached the store (or none is needed), 0 while proxies go on with local counts. */
  storeReachable: number;
  syncFailures: number;
  /** Live proxies sharing the limits (1 when not syncing). */
  proxies: number;
}

/** Distinct series of tcg_rate_limited_total before the rest count as limit="other". */
export const RATE_LIMITED_SERIES = 1000;

export class Metrics {
  readonly registry = new Registry();
  /** decision × method × status class, flattened. */
  readonly #proxied = new Float64Array(DECISIONS.length * METHODS.length * STATUS_CLASSES.length);
  bytesIn = 0;
  bytesOut = 0;
  storeErrors = 0;
  readonly caches: Record<CacheName, CacheCounters> = {
    agents: { hits: 0, misses: 0, evictions: 0 },
    policies: { hits: 0, misses: 0, evictions: 0 },
    credentials: { hits: 0, misses: 0, evictions: 0 },
  };
  readonly #byAgent: Map<string, number> | null;
  /** Calls refused 429 per limit name, or per limit name and agent ("name\0agent") with METRICS_AGENT_LABEL; at most RATE_LIMITED_SERIES keys and 'other'. */
  readonly #rateLimited = new Map<string, number>();
  readonly upstreamLatency: FastHistogram;
  readonly totalLatency: FastHistogram;
  readonly batchRows: Histogram;
  readonly flushSeconds: Histogram;
  #sources: MetricSources | null = null;

  constructor(options: { agentLabel: boolean }) {
    const registry = this.registry;
    this.#byAgent = options.agentLabel ? new Map() : null;
    collectDefaultMetrics({ register: registry, prefix: 'tcg_' });
    const self = this;

    new Counter({
      name: 'tcg_proxy_requests_total',
      help: 'Proxied calls by decision, method and status class.',
      labelNames: ['decision', 'method', 'status_class'],
      registers: [registry],
      collect() {
        this.reset();
        for (let d = 0; d < DECISIONS.length; d++) {
          for (let m = 0; m < METHODS.length; m++) {
            for (let s = 0; s < STATUS_CLASSES.length; s++) {
              const value = self.#proxied[(d * METHODS.length + m) * STATUS_CLASSES.length + s]!;
              if (value > 0) this.inc({ decision: DECISIONS[d]!, method: METHODS[m]!, status_class: STATUS_CLASSES[s]! }, value);
            }
          }
        }
      },
    });
    if (this.#byAgent !== null) {
      const byAgent = this.#byAgent;
      new Counter({
        name: 'tcg_proxy_agent_requests_total',
        help: 'Proxied calls per agent (METRICS_AGENT_LABEL).',
        labelNames: ['agent_id'],
        registers: [registry],
        collect() {
          this.reset();
          for (const [agentId, value] of byAgent) this.inc({ agent_id: agentId }, value);
        },
      });
    }
    const rateLimited = this.#rateLimited;
    const agentLabel = this.#byAgent !== null;
    new Counter({
      name: 'tcg_rate_limited_total',
      help: 'Calls refused 429 by a rate limit, per limit name (and agent with METRICS_AGENT_LABEL).',
      labelNames: agentLabel ? ['limit', 'agent_id'] : ['limit'],
      registers: [registry],
      collect() {
        this.reset();
        for (const [key, value] of rateLimited) {
          const cut = key.indexOf('\0');
          this.inc(cut < 0 ? { limit: key } : { limit: key.slice(0, cut), agent_id: key.slice(cut + 1) }, value);
        }
      },
    });
    const counter = (name: string, help: string, read: () => number) =>
      new Counter({ name, help, registers: [registry], collect() { this.reset(); this.inc(read()); } });
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({ name, help, registers: [registry], collect() { this.set(read()); } });
    counter('tcg_proxy_request_bytes_total', 'Request body bytes received from agents.', () => self.bytesIn);
    counter('tcg_proxy_response_bytes_total', 'Response body bytes sent to agents.', () => self.bytesOut);
    counter('tcg_store_errors_total', 'Calls answered 503 because a store could not be reached.', () => self.storeErrors);
    for (const kind of ['hits', 'misses', 'evictions'] as const) {
      new Counter({
        name: `tcg_cache_${kind}_total`,
        help: `Proxy cache ${kind}.`,
        labelNames: ['cache'],
        registers: [registry],
        collect() {
          this.reset();
          for (const name of Object.keys(self.caches) as CacheName[]) this.inc({ cache: name }, self.caches[name][kind]);
        },
      });
    }
    const audit = () => self.#sources?.auditStats() ?? { queued: 0, written: 0, spooled: 0, replayed: 0, failedAttempts: 0, pending: 0, spooledBatches: 0, refusalsUnrecorded: 0 };
    counter('tcg_audit_rows_queued_total', 'Audit rows accepted.', () => audit().queued);
    counter('tcg_audit_rows_written_total', 'Audit rows written to the audit store.', () => audit().written);
    counter('tcg_audit_rows_spooled_total', 'Audit rows written to the on-disk spool.', () => audit().spooled);
    counter('tcg_audit_rows_replayed_total', 'Audit rows replayed from the spool.', () => audit().replayed);
    counter('tcg_audit_refusals_unrecorded_total', 'Calls refused 503 by an overfull audit pipeline, answered without an audit record.', () => audit().refusalsUnrecorded);
    counter('tcg_audit_insert_failures_total', 'Audit inserts the store refused.', () => audit().failedAttempts);
    gauge('tcg_audit_rows_pending', 'Audit rows held in memory.', () => audit().pending);
    gauge('tcg_audit_spool_batches', 'Audit batches waiting in the spool.', () => audit().spooledBatches);
    const limits = () => self.#sources?.rateLimits?.() ?? { counters: 0, storeReachable: 1, syncFailures: 0, proxies: 1 };
    gauge('tcg_rate_limit_counters', 'Rate-limit counters in use (one per agent and limit).', () => limits().counters);
    gauge('tcg_rate_limit_store_reachable', '1 while rate limits are shared through the store; 0 while this proxy counts alone.', () => limits().storeReachable);
    counter('tcg_rate_limit_sync_failures_total', 'Rate-limit syncs that could not reach the store.', () => limits().syncFailures);
    gauge('tcg_rate_limit_proxies', 'Live proxies sharing the rate limits.', () => limits().proxies);
    const approvals = () => self.#sources?.approvals?.() ?? NO_APPROVALS;
    gauge('tcg_approvals_held', 'Calls held open now, waiting for a person to approve or deny them.', () => approvals().held);
    counter('tcg_approvals_created_total', 'Approvals created (calls that needed one).', () => approvals().created);
    counter('tcg_approval_webhook_deliveries_total', 'Approval webhook notifications delivered (2xx).', () => approvals().webhookDelivered);
    counter('tcg_approval_webhook_failures_total', 'Approval webhook attempts that failed (each retry counts).', () => approvals().webhookFailures);
    counter('tcg_approval_webhook_dropped_total', 'Approval webhook notifications given up on (out of attempts, or too many queued).', () => approvals().webhookDropped);
    gauge('tcg_proxy_in_flight', 'Proxied calls under way (one per open proxied connection).', () => self.#sources?.inFlight() ?? 0);
    this.upstreamLatency = new FastHistogram({
      name: 'tcg_proxy_upstream_latency_seconds',
      help: 'From forwarding a call to the upstream response head.',
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    });
    this.totalLatency = new FastHistogram({
      name: 'tcg_proxy_request_duration_seconds',
      help: 'From a call\'s arrival to its last response byte.',
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    });
    this.batchRows = new Histogram({
      name: 'tcg_audit_batch_rows',
      help: 'Rows per audit insert.',
      buckets: [1, 10, 50, 100, 500, 1000, 5000, 10000],
      registers: [registry],
    });
    this.flushSeconds = new Histogram({
      name: 'tcg_audit_flush_seconds',
      help: 'Duration of one audit insert.',
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    });
  }

  setSources(sources: MetricSources): void {
    this.#sources = sources;
  }

  /** One finished proxied call. */
  recordProxied(decision: AuditDecision, method: string, status: number, agentId: string | null): void {
    const d = decision === 'allowed' ? 0 : 1;
    let m = METHODS.indexOf(method as (typeof METHODS)[number]);
    if (m < 0) m = METHODS.length - 1;
    const s = Math.min(Math.max(Math.floor(status / 100) - 1, 0), STATUS_CLASSES.length - 1);
    const i = (d * METHODS.length + m) * STATUS_CLASSES.length + s;
    this.#proxied[i] = this.#proxied[i]! + 1;
    if (this.#byAgent !== null && agentId !== null) this.#byAgent.set(agentId, (this.#byAgent.get(agentId) ?? 0) + 1);
  }

  /**
   * One call refused by the limit `name`. Limit names are the tenants' (any
   * signed-up user writes them): past RATE_LIMITED_SERIES distinct ones, the
   * rest count as `limit="other"`, so no user can grow /metrics and this map
   * without bound.
   */
  recordRateLimited(name: string, agentId: string): void {
    let key = this.#byAgent !== null ? `${name}\0${agentId}` : name;
    if (!this.#rateLimited.has(key) && this.#rateLimited.size >= RATE_LIMITED_SERIES) key = this.#byAgent !== null ? 'other\0other' : 'other';
    this.#rateLimited.set(key, (this.#rateLimited.get(key) ?? 0) + 1);
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

// APPROVAL_WEBHOOK_URL: each new pending approval is POSTed there as JSON (the
// approval as GET /approvals lists it, plus approve_url), signed with
// `X-Guard-Signature: sha256=<hex HMAC-SHA256 of the raw body>`. Sending never
// blocks or slows a call: notify() queues and returns; a few deliveries run at
// once, each failure is retried with exponential back-off, and what cannot be
// delivered is counted and logged (by approval id and the URL's origin only:
// webhook URLs often carry a token in their path, and the secret is never logged).
import { createHmac } from 'node:crypto';
import { approvalJson } from '../shared/approvals.js';
import type { Logger } from '../shared/log.js';
import { Pool } from '../shared/undici.js';
import type { Approval } from '../shared/types.js';

/** Attempts per notification, the first included. */
const ATTEMPTS = 8;
/** Back-off before retry n (1-based): 1 s, 2 s, 4 s, ... capped at 60 s, ±20 %. */
const BACKOFF_BASE_MS = 1000;
const BACKOFF_MAX_MS = 60_000;
/** Notifications queued or waiting to retry, at most; beyond, new ones are dropped. */
const MAX_PENDING = 10_000;
const CONCURRENCY = 4;
const ATTEMPT_TIMEOUT_MS = 10_000;

interface Delivery {
  readonly approvalId: string;
  readonly body: string;
  readonly signature: string;
  attempts: number;
}

export interface WebhookStats {
  delivered: number;
  failures: number;
  dropped: number;
}

export class ApprovalWebhook {
  readonly #path: string;
  readonly #origin: string;
  /** Keep-alive connections to the webhook's origin, opened with the first notification. */
  #pool: Pool | null = null;
  readonly #secret: string;
  readonly #publicUrl: () => string;
  readonly #log: Logger;
  readonly #ready: Delivery[] = [];
  readonly #retrying = new Set<NodeJS.Timeout>();
  #inFlight = 0;
  #closed = false;
  readonly stats: WebhookStats = { delivered: 0, failures: 0, dropped: 0 };

  constructor(options: { url: string; secret: string; publicUrl: () => string; log: Logger }) {
    const url = new URL(options.url);
    this.#path = `${url.pathname}${url.search}`;
    this.#origin = url.origin;
    this.#secret = options.secret;
    this.#publicUrl = options.publicUrl;
    this.#log = options.log;
  }

  /** Queues the approval's notification; returns at once. */
  notify(approval: Approval): void {
    if (this.#closed) return;
    if (this.#ready.length + this.#retrying.size + this.#inFlight >= MAX_PENDING) {
      this.stats.dropped++;
      this.#log.error('approval webhook queue full; notification dropped', { approval_id: approval.id, webhook: this.#origin });
      return;
    }
    const body = JSON.stringify({ ...approvalJson(approval), approve_url: `${this.#publicUrl()}/approvals/${approval.id}/approve` });
    const signature = `sha256=${createHmac('sha256', this.#secret).update(body).digest('hex')}`;
    this.#ready.push({ approvalId: approval.id, body, signature, attempts: 0 });
    this.#pump();
  }

  /** Stops: queued and retrying notifications are dropped (counted and logged). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const timer of this.#retrying) clearTimeout(timer);
    const left = this.#ready.length + this.#retrying.size;
    this.#retrying.clear();
    this.#ready.length = 0;
    // Deliveries in flight finish (each within ATTEMPT_TIMEOUT_MS); then the connections close.
    void this.#pool?.close().catch(() => undefined);
    if (left > 0) {
      this.stats.dropped += left;
      this.#log.warn('approval webhook notifications not delivered before shutdown', { notifications: left, webhook: this.#origin });
    }
  }

  #pump(): void {
    while (!this.#closed && this.#inFlight < CONCURRENCY && this.#ready.length > 0) void this.#send(this.#ready.shift()!);
  }

  async #send(delivery: Delivery): Promise<void> {
    this.#inFlight++;
    delivery.attempts++;
    let problem: string | null = null;
    try {
      this.#pool ??= new Pool(this.#origin, { connections: CONCURRENCY });
      const response = await this.#pool.request({
        path: this.#path,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-guard-signature': delivery.signature, 'user-agent': 'tool-call-guard' },
        body: delivery.body,
        headersTimeout: ATTEMPT_TIMEOUT_MS,
        bodyTimeout: ATTEMPT_TIMEOUT_MS,
      });
      await response.body.dump();
      if (response.statusCode < 200 || response.statusCode > 299) {
        problem = `status ${response.statusCode}`;
        // A refusal that a retry cannot change (a 4xx other than 408 and 429): not retried.
        if (response.statusCode >= 400 && response.statusCode < 500 && response.statusCode !== 408 && response.statusCode !== 429) delivery.attempts = ATTEMPTS;
      }
    } catch (err) {
      problem = (err as { code?: string }).code ?? (err as Error).name;
    } finally {
      this.#inFlight--;
    }
    if (problem === null) {
      this.stats.delivered++;
    } else {
      this.stats.failures++;
      this.#retryLater(delivery, problem);
    }
    this.#pump();
  }

  #retryLater(delivery: Delivery, problem: string): void {
    const fields = { approval_id: delivery.approvalId, webhook: this.#origin, attempt: delivery.attempts, problem };
    if (this.#closed || delivery.attempts >= ATTEMPTS) {
      this.stats.dropped++;
      this.#log.error('approval webhook failed; notification dropped', fields);
      return;
    }
    const backoff = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (delivery.attempts - 1)) * (0.8 + Math.random() * 0.4);
    this.#log.warn('approval webhook failed; retrying', { ...fields, retry_in_ms: Math.round(backoff) });
    const timer = setTimeout(() => {
      this.#retrying.delete(timer);
      this.#ready.push(delivery);
      this.#pump();
    }, backoff);
    timer.unref();
    this.#retrying.add(timer);
  }
}

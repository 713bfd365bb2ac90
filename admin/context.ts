// What every admin resource handler is given.
import type { Config } from '../shared/config.js';
import type { AuditBatcher } from '../shared/audit/audit-batcher.js';
import type { Metrics } from '../shared/metrics.js';
import type { Secrets } from '../shared/secrets.js';
import type { SigningKey } from '../shared/audit/seal.js';
import type { AuditStore } from '../shared/stores/audit-store.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import type { Caller } from './auth.js';
import type { AdminRequest, AdminResponse } from './http.js';

export interface AdminContext {
  config: Readonly<Config>;
  /** PUBLIC_URL, or the local origin once the listener knows its port. */
  publicUrl(): string;
  secrets: Secrets;
  /** Signs audit seals; the admin side reads only its public half. */
  signingKey: SigningKey;
  store: MetadataStore;
  auditStore: AuditStore;
  auditBatcher: AuditBatcher;
  /** Counts store errors for /metrics. */
  metrics?: Metrics;
}

/** A route handler: the request, the authenticated caller, and the path's `:params`. */
export type Handler = (req: AdminRequest, caller: Caller, params: Record<string, string>) => Promise<AdminResponse>;

// Configuration: read from the environment (and an optional `.env` file) once at
// start, validated, frozen. Nothing else in the service reads process.env.
import { existsSync, readFileSync } from 'node:fs';
import { isIP, isIPv6 } from 'node:net';
import { resolve } from 'node:path';
import { parseEnv } from 'node:util';
import { signingKeyFromPem } from './audit/seal.js';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type SpoolFullPolicy = 'reject' | 'drop';

export interface Config {
  port: number;
  host: string;
  /** null: `http://localhost:<the port actually bound>` (see RunningService.publicUrl). */
  publicUrl: string | null;
  dataDir: string;
  mongodbUrl: string | null;
  clickhouseUrl: string | null;
  adminUrl: string | null;
  jwtSecret: string | null;
  secretKey: string | null;
  /** PKCS#8 PEM of the Ed25519 key that signs audit seals; null: generated into DATA_DIR (all-in-one only). */
  auditSigningKey: string | null;
  allowTargets: readonly string[];
  logLevel: LogLevel;
  jwtTtlSeconds: number;
  auditBatchRows: number;
  auditBatchMs: number;
  auditBatchIntervalMs: number;
  auditRetentionDays: number;
  auditQueueMax: number;
  auditQueueMaxBytes: number;
  cacheMaxEntries: number;
  cacheTtlMs: number;
  upstreamConnectTimeoutMs: number;
  upstreamHeadersTimeoutMs: number;
  upstreamBodyTimeoutMs: number;
  upstreamStreamIdleMs: number;
  shutdownDrainMs: number;
  chdbThreadNice: number;
  upstreamConnections: number;
  upstreamConnectionsTotal: number;
  outputCaptureBytes: number;
  loginMaxFailures: number;
  loginWindowSeconds: number;
  signupMaxPerAddress: number;
  signupWindowSeconds: number;
  pdfMaxEntries: number;
  auditStreamPollMs: number;
  auditStreamsPerOrg: number;
  auditStreamsMax: number;
  auditStreamKeepaliveMs: number;
  dnsServer: string | null;
  dnsCacheTtlMs: number;
  metricsEnabled: boolean;
  metricsToken: string | null;
  metricsPublic: boolean;
  metricsAgentLabel: boolean;
  logRequestSample: number;
  spoolDir: string | null;
  spoolMaxBytes: number;
  changePollMs: number;
  rateLimitSyncMs: number;
  rateLimitMaxCounters: number;
  /** How long the proxy holds a call that needs approval before answering 202 (0: at once). */
  approvalHoldS: number;
  /** Pending approvals one agent may have at once; beyond, a call that needs one is refused 429. */
  approvalMaxPending: number;
  /** Where each new pending approval is POSTed (null: nowhere), signed with approvalWebhookSecret. */
  approvalWebhookUrl: string | null;
  approvalWebhookSecret: string | null;
  /** PEM text of NODE_EXTRA_CA_CERTS, trusted for upstream TLS besides Node's roots. */
  extraCa: string | null;
}

interface Spec {
  env: string;
  key: keyof Config;
  doc: string;
  parse: (raw: string) => unknown;
  fallback: unknown;
}

class ConfigError extends Error {}

function integer(min: number, max: number) {
  return (raw: string): number => {
    if (!/^\d+$/.test(raw)) throw new ConfigError(`must be a whole number from ${min} to ${max}`);
    const n = Number(raw);
    if (n < min || n > max) throw new ConfigError(`must be a whole number from ${min} to ${max}`);
    return n;
  };
}

function url(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError('must be an absolute URL');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError('must be an http(s) URL');
  return raw.replace(/\/+$/, '');
}

function oneOf<T extends string>(values: readonly T[]) {
  return (raw: string): T => {
    if (!values.includes(raw as T)) throw new ConfigError(`must be one of ${values.join(', ')}`);
    return raw as T;
  };
}

const text = (raw: string): string => raw;

function oneOfBool(raw: string): boolean {
  if (raw === 'true' || raw === '1') return true;
  if (raw === 'false' || raw === '0') return false;
  throw new ConfigError('must be true or false');
}

/** Every variable the service reads (test/unit/docs.test.ts checks that the README's table has each, and no other). */
export const CONFIG_SPECS: readonly Spec[] = [
  { env: 'PORT', key: 'port', doc: 'public listener port', parse: integer(0, 65535), fallback: 8080 },
  { env: 'HOST', key: 'host', doc: 'public listener address', parse: (r) => {
    // [::1] as a URL writes it: the listener takes the address bare.
    const bare = r.startsWith('[') && r.endsWith(']') ? r.slice(1, -1) : r;
    if (bare.length === 0 || /[\s/[\]]/.test(bare)) throw new ConfigError('must be an IP address or a host name (without a port, a path or spaces)');
    return bare;
  }, fallback: '127.0.0.1' },
  { env: 'PUBLIC_URL', key: 'publicUrl', doc: 'origin used in proxy_url', parse: url, fallback: null },
  { env: 'DATA_DIR', key: 'dataDir', doc: 'embedded stores, generated secrets, audit spool', parse: (r) => resolve(r), fallback: resolve('data') },
  { env: 'MONGODB_URL', key: 'mongodbUrl', doc: 'metadata in MongoDB instead of SQLite', parse: (r) => {
    if (!/^mongodb(\+srv)?:\/\//.test(r)) throw new ConfigError('must start with mongodb:// or mongodb+srv://');
    return r;
  }, fallback: null },
  { env: 'CLICKHOUSE_URL', key: 'clickhouseUrl', doc: 'audit in a ClickHouse server instead of embedded chDB', parse: url, fallback: null },
  { env: 'ADMIN_URL', key: 'adminUrl', doc: 'where a split-mode proxy passes admin paths', parse: url, fallback: null },
  { env: 'JWT_SECRET', key: 'jwtSecret', doc: 'HS256 signing key, at least 32 characters', parse: (r) => {
    if (r.length < 32) throw new ConfigError('must be at least 32 characters');
    return r;
  }, fallback: null },
  { env: 'SECRET_KEY', key: 'secretKey', doc: 'credential encryption key, 64 hex characters', parse: (r) => {
    if (!/^[0-9a-fA-F]{64}$/.test(r)) throw new ConfigError('must be 64 hex characters (32 bytes)');
    return r.toLowerCase();
  }, fallback: null },
  { env: 'AUDIT_SIGNING_KEY', key: 'auditSigningKey', doc: 'Ed25519 private key (PKCS#8 PEM; `\\n` for newlines) that signs audit seals; generated into DATA_DIR when unset (all-in-one)', parse: (r) => {
    const pem = r.replaceAll('\\n', '\n');
    try {
      signingKeyFromPem(pem);
    } catch (err) {
      throw new ConfigError((err as Error).message);
    }
    return pem;
  }, fallback: null },
  { env: 'GUARD_ALLOW_TARGETS', key: 'allowTargets', doc: 'hosts and CIDRs the SSRF guard lets through', parse: (r) =>
    Object.freeze(r.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean)), fallback: Object.freeze([]) },
  { env: 'LOG_LEVEL', key: 'logLevel', doc: 'debug, info, warn, error', parse: oneOf(['debug', 'info', 'warn', 'error'] as const), fallback: 'info' },
  { env: 'LOG_REQUEST_SAMPLE', key: 'logRequestSample', doc: 'share of proxied calls logged at info (the rest at debug)', parse: (r) => {
    if (!/^(0(\.\d+)?|1(\.0+)?)$/.test(r)) throw new ConfigError('must be a number from 0 to 1');
    return Number(r);
  }, fallback: 0 },
  { env: 'METRICS_ENABLED', key: 'metricsEnabled', doc: 'serve GET /metrics and count for it', parse: oneOfBool, fallback: true },
  { env: 'METRICS_TOKEN', key: 'metricsToken', doc: 'bearer token GET /metrics requires', parse: (r) => {
    if (r.length < 16) throw new ConfigError('must be at least 16 characters');
    return r;
  }, fallback: null },
  { env: 'METRICS_PUBLIC', key: 'metricsPublic', doc: 'allow GET /metrics without METRICS_TOKEN on a non-loopback HOST', parse: oneOfBool, fallback: false },
  { env: 'METRICS_AGENT_LABEL', key: 'metricsAgentLabel', doc: 'count proxied calls per agent id (one series per agent)', parse: oneOfBool, fallback: false },
  { env: 'JWT_TTL_SECONDS', key: 'jwtTtlSeconds', doc: 'access token lifetime', parse: integer(60, 30 * 86400), fallback: 12 * 3600 },
  { env: 'AUDIT_BATCH_ROWS', key: 'auditBatchRows', doc: 'audit rows per insert, at most', parse: integer(1, 100_000), fallback: 20_000 },
  { env: 'AUDIT_BATCH_MS', key: 'auditBatchMs', doc: 'longest an audit row waits before its batch is written, after a quiet spell (see AUDIT_BATCH_INTERVAL_MS)', parse: integer(1, 60_000), fallback: 250 },
  { env: 'AUDIT_BATCH_INTERVAL_MS', key: 'auditBatchIntervalMs', doc: 'least time between two audit batches (AUDIT_BATCH_ROWS aside): under load rows gather into fewer, larger inserts, each of which ClickHouse writes and merges as a part (ClickHouse\'s advice: about one insert a second); 0: a batch every AUDIT_BATCH_MS', parse: integer(0, 60_000), fallback: 1000 },
  { env: 'CHDB_THREAD_NICE', key: 'chdbThreadNice', doc: 'all-in-one on the embedded ClickHouse (Linux): nice value of the engine\'s threads, so its inserts and merges yield the cores to the calls being served; Node\'s own threads keep theirs (0: leave them as started)', parse: integer(0, 19), fallback: 10 },
  { env: 'AUDIT_RETENTION_DAYS', key: 'auditRetentionDays', doc: 'audit rows older than this are dropped (TTL)', parse: integer(1, 36500), fallback: 365 },
  { env: 'AUDIT_QUEUE_MAX', key: 'auditQueueMax', doc: 'audit rows held in memory before proxying answers 503', parse: integer(100, 10_000_000), fallback: 200_000 },
  { env: 'AUDIT_QUEUE_MAX_BYTES', key: 'auditQueueMaxBytes', doc: 'bytes of audit rows held in memory before proxying answers 503', parse: integer(1024 * 1024, 1024 ** 4), fallback: 256 * 1024 * 1024 },
  { env: 'SPOOL_DIR', key: 'spoolDir', doc: 'audit spool directory, one per process', parse: (r) => resolve(r), fallback: null },
  { env: 'SPOOL_MAX_BYTES', key: 'spoolMaxBytes', doc: 'spool size at which the proxy refuses new calls with 503', parse: integer(1024, 1024 ** 4), fallback: 1024 ** 3 },
  { env: 'CACHE_MAX_ENTRIES', key: 'cacheMaxEntries', doc: 'entries per proxy cache (keys, policies, credentials)', parse: integer(1, 10_000_000), fallback: 100_000 },
  { env: 'CACHE_TTL_MS', key: 'cacheTtlMs', doc: 'how long a proxy cache entry lives', parse: integer(1, 86_400_000), fallback: 60_000 },
  { env: 'CHANGE_POLL_MS', key: 'changePollMs', doc: 'split mode (and all-in-one on MongoDB): how often a proxy polls the metadata change log', parse: integer(10, 60_000), fallback: 250 },
  { env: 'RATE_LIMIT_SYNC_MS', key: 'rateLimitSyncMs', doc: 'split mode and MongoDB: how often a proxy shares its rate-limit counts through the metadata store (0: each proxy counts alone)', parse: integer(0, 60_000), fallback: 250 },
  { env: 'RATE_LIMIT_MAX_COUNTERS', key: 'rateLimitMaxCounters', doc: 'rate-limit counters (agent × limit in use) a proxy keeps, at most; beyond, new ones are refused 429', parse: integer(1000, 100_000_000), fallback: 2_000_000 },
  { env: 'APPROVAL_HOLD_S', key: 'approvalHoldS', doc: 'how long the proxy keeps a call that needs approval open, waiting for a decision, before it answers 202 (0: at once)', parse: integer(0, 3600), fallback: 25 },
  { env: 'APPROVAL_MAX_PENDING', key: 'approvalMaxPending', doc: 'pending approvals one agent may have at once; a call that needs another is refused 429 until some are decided or expire', parse: integer(1, 1_000_000), fallback: 100 },
  { env: 'APPROVAL_WEBHOOK_URL', key: 'approvalWebhookUrl', doc: 'each new pending approval is POSTed here as JSON (set it on every proxy process)', parse: url, fallback: null },
  { env: 'APPROVAL_WEBHOOK_SECRET', key: 'approvalWebhookSecret', doc: 'HMAC-SHA256 key of the webhook\'s X-Guard-Signature, at least 16 characters; required with APPROVAL_WEBHOOK_URL', parse: (r) => {
    if (r.length < 16) throw new ConfigError('must be at least 16 characters');
    return r;
  }, fallback: null },
  { env: 'UPSTREAM_CONNECT_TIMEOUT_MS', key: 'upstreamConnectTimeoutMs', doc: 'TCP+TLS connect deadline', parse: integer(1, 600_000), fallback: 5000 },
  { env: 'UPSTREAM_HEADERS_TIMEOUT_MS', key: 'upstreamHeadersTimeoutMs', doc: 'deadline for the upstream response head', parse: integer(1, 3_600_000), fallback: 30_000 },
  { env: 'UPSTREAM_BODY_TIMEOUT_MS', key: 'upstreamBodyTimeoutMs', doc: 'longest gap between upstream body chunks', parse: integer(1, 3_600_000), fallback: 30_000 },
  { env: 'UPSTREAM_STREAM_IDLE_MS', key: 'upstreamStreamIdleMs', doc: 'longest gap between upstream body chunks when the agent accepts an event stream', parse: integer(1, 86_400_000), fallback: 300_000 },
  { env: 'SHUTDOWN_DRAIN_MS', key: 'shutdownDrainMs', doc: 'on SIGTERM/SIGINT, how long calls in flight may go on before they are ended', parse: integer(0, 600_000), fallback: 10_000 },
  { env: 'UPSTREAM_CONNECTIONS', key: 'upstreamConnections', doc: 'keep-alive connections per upstream origin, at most', parse: integer(1, 10_000), fallback: 256 },
  { env: 'UPSTREAM_CONNECTIONS_TOTAL', key: 'upstreamConnectionsTotal', doc: 'upstream calls in flight (so connections in use) across all origins, at most; a call beyond waits for one to end', parse: integer(1, 1_000_000), fallback: 4096 },
  { env: 'OUTPUT_CAPTURE_BYTES', key: 'outputCaptureBytes', doc: 'cap of the response body stored for log_outputs: full', parse: integer(0, 16 * 1024 * 1024), fallback: 65536 },
  { env: 'LOGIN_MAX_FAILURES', key: 'loginMaxFailures', doc: 'failed logins per email or client address before 429', parse: integer(1, 1_000_000), fallback: 10 },
  { env: 'LOGIN_WINDOW_SECONDS', key: 'loginWindowSeconds', doc: 'window of LOGIN_MAX_FAILURES', parse: integer(1, 86_400), fallback: 900 },
  { env: 'SIGNUP_MAX_PER_ADDRESS', key: 'signupMaxPerAddress', doc: 'signups one client address may attempt in SIGNUP_WINDOW_SECONDS before 429 (each is ~30 ms of argon2 and a new organization)', parse: integer(1, 1_000_000), fallback: 20 },
  { env: 'SIGNUP_WINDOW_SECONDS', key: 'signupWindowSeconds', doc: 'window of SIGNUP_MAX_PER_ADDRESS', parse: integer(1, 86_400), fallback: 3600 },
  { env: 'AUDIT_STREAM_POLL_MS', key: 'auditStreamPollMs', doc: 'how often the admin process reads new audit rows for open GET /audit/stream streams (only while one is open)', parse: integer(50, 10_000), fallback: 250 },
  { env: 'AUDIT_STREAMS_PER_ORG', key: 'auditStreamsPerOrg', doc: 'GET /audit/stream streams of one organization a process serves at once (the next is 429)', parse: integer(1, 100_000), fallback: 32 },
  { env: 'AUDIT_STREAMS_MAX', key: 'auditStreamsMax', doc: 'GET /audit/stream streams a process serves at once (the next is 503): every poll filters each new entry for each and writes to each, on the loop the proxy shares all-in-one', parse: integer(1, 100_000), fallback: 256 },
  { env: 'AUDIT_STREAM_KEEPALIVE_MS', key: 'auditStreamKeepaliveMs', doc: 'interval of the comment line that keeps an idle GET /audit/stream open (the contract promises one at least every 15 s; timers only fire late, so the default leaves room)', parse: integer(100, 15_000), fallback: 10_000 },
  { env: 'PDF_MAX_ENTRIES', key: 'pdfMaxEntries', doc: 'audit entries listed in a PDF export, at most', parse: integer(0, 100_000), fallback: 500 },
  { env: 'GUARD_DNS_CACHE_TTL_MS', key: 'dnsCacheTtlMs', doc: 'how long a checked DNS answer is reused', parse: integer(1, 3_600_000), fallback: 30_000 },
  { env: 'GUARD_DNS_SERVER', key: 'dnsServer', doc: 'DNS server (ip[:port]) the proxy resolves targets with', parse: dnsServer, fallback: null },
  { env: 'NODE_EXTRA_CA_CERTS', key: 'extraCa', doc: 'extra trusted CA file (PEM) for upstream TLS', parse: (r) => {
    let pem: string;
    try {
      pem = readFileSync(r, 'utf8');
    } catch {
      throw new ConfigError('cannot read that file');
    }
    if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError('is not a PEM certificate file');
    return pem;
  }, fallback: null },
];

/**
 * A refused value as the error shows it: never a secret (keys, tokens), and of
 * a URL only its scheme and host (its user, password or path may be one).
 */
function shownValue(name: string, raw: string): string {
  if (/SECRET|_KEY$|TOKEN|PASSWORD/.test(name)) return '***';
  if (name.endsWith('_URL')) {
    const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(raw)?.[0];
    if (scheme === undefined) return '***';
    // After the last '@': a password may hold '#', '/' or '@' itself.
    const rest = raw.slice(Math.max(scheme.length, raw.lastIndexOf('@') + 1));
    return JSON.stringify(`${scheme}${rest.split(/[/?#]/)[0]}/...`);
  }
  return JSON.stringify(raw);
}

/** `ip`, `ip:port` or `[ipv6]:port`, port 1 to 65535: c-ares aborts the process on port 0 and wraps larger ones. */
function dnsServer(raw: string): string {
  const m = /^(?:\[([^\]]+)\]|([^:]+)|([^[\]]+))(?::(\d{1,5}))?$/.exec(raw);
  const host = m?.[1] ?? m?.[2] ?? m?.[3];
  const port = m?.[4] === undefined ? 53 : Number(m[4]);
  // An IPv6 address without brackets has no port (its colons are its own).
  const ok = host !== undefined && (m?.[3] !== undefined ? isIPv6(host) && m?.[4] === undefined : isIP(host) !== 0) && port >= 1 && port <= 65_535;
  if (!ok) throw new ConfigError('must be an IP address with an optional port (1.1.1.1, 1.1.1.1:5353, [::1]:53)');
  return raw;
}

/** Variables that are not ours but that the service honours (Node reads them itself). */
const FOREIGN_KNOWN = new Set(['NODE_ENV', 'NODE_OPTIONS']);

/**
 * Build the config from `env` (default: process.env plus `.env` in the working
 * directory, where the environment wins). Throws one error listing every problem.
 */
export function loadConfig(env: NodeJS.ProcessEnv = readEnvironment()): Readonly<Config> {
  const problems: string[] = [];
  const out: Record<string, unknown> = {};
  for (const spec of CONFIG_SPECS) {
    // Blank is unset: HOST=" " read as "" bound every interface, DATA_DIR=" " the working directory.
    const raw = env[spec.env]?.trim();
    if (raw === undefined || raw === '') {
      out[spec.key] = spec.fallback;
      continue;
    }
    try {
      out[spec.key] = spec.parse(raw);
    } catch (err) {
      problems.push(`${spec.env}=${shownValue(spec.env, raw)}: ${(err as Error).message}`);
    }
  }
  if (problems.length > 0) throw new Error(`invalid configuration:\n  ${problems.join('\n  ')}`);
  const config = out as unknown as Config;
  if (config.spoolDir === null) config.spoolDir = resolve(config.dataDir, 'spool');
  return Object.freeze(config);
}

function readEnvironment(): NodeJS.ProcessEnv {
  const file = resolve('.env');
  if (!existsSync(file)) return process.env;
  const parsed = parseEnv(readFileSync(file, 'utf8')) as Record<string, string>;
  const known = new Set(CONFIG_SPECS.map((s) => s.env));
  const unknown = Object.keys(parsed).filter((k) => !known.has(k) && !FOREIGN_KNOWN.has(k));
  if (unknown.length > 0) throw new Error(`invalid configuration: .env names unknown variables: ${unknown.join(', ')}`);
  return { ...parsed, ...process.env };
}

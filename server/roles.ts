// The three roles a process can take, and what each refuses to start without.
// Kept free of heavy imports: the entry points check this before the stores,
// uWS or the embedded ClickHouse are loaded, so a refusal answers at once.
import type { Config } from '../shared/config.js';
import { isLoopbackAddress } from '../shared/ip.js';

export type Role = 'all-in-one' | 'proxy' | 'admin';

/** Why this configuration may not start in this role (empty: it may). */
export function startProblems(config: Readonly<Config>, role: Role): string[] {
  const problems: string[] = [];
  if (role !== 'all-in-one') {
    if (config.jwtSecret === null) problems.push('JWT_SECRET must be set (every process must share it)');
    if (config.secretKey === null) problems.push('SECRET_KEY must be set (every process must share it)');
    if (config.auditSigningKey === null) problems.push('AUDIT_SIGNING_KEY must be set (every process must share it: seals are verified with its public key)');
    if (config.clickhouseUrl === null) problems.push('CLICKHOUSE_URL must be set (the embedded engine is one process\'s own)');
    if (role === 'proxy' && config.adminUrl === null) problems.push('ADMIN_URL must be set (where this proxy passes admin paths)');
  }
  if (role !== 'admin' && config.approvalWebhookUrl !== null && config.approvalWebhookSecret === null) {
    problems.push('APPROVAL_WEBHOOK_SECRET must be set with APPROVAL_WEBHOOK_URL (the webhook is signed with it)');
  }
  if (config.metricsEnabled && config.metricsToken === null && !config.metricsPublic && !isLoopbackHost(config.host)) {
    problems.push(`GET /metrics would be open to anyone who reaches ${config.host}: set METRICS_TOKEN, or METRICS_PUBLIC=true if that is meant, or METRICS_ENABLED=false`);
  }
  return problems;
}

/** A listener address only this machine can reach: 127.0.0.0/8, ::1, or the name localhost. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return bare.toLowerCase() === 'localhost' || isLoopbackAddress(bare);
}

// `npm run verify-audit`: verifies the audit log offline, from the ClickHouse
// store and the public key, without the service (CONTRACT.md "Tamper-evident
// audit"). The same configuration as the service: CLICKHOUSE_URL, or the
// embedded store in DATA_DIR (stop the service first: one process owns it).
// Chain heads are read from the metadata store when it is there (DATA_DIR's
// SQLite file, or MONGODB_URL), so a truncated tail shows too.
//
//   npm run verify-audit -- [--since ISO] [--until ISO] [--org UUID] [--public-key FILE]
//
// One JSON line per org, then a summary line; exit 0 when every org verifies,
// 1 on a problem, 2 on bad usage or an unreachable store.
import { existsSync, readFileSync } from 'node:fs';
import { createPublicKey, type KeyObject } from 'node:crypto';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { verifyAudit, verifyJson, type ChainHead } from '../shared/audit/audit-verify.js';
import { COMMAND_SIGNATURE_WORKERS } from '../shared/audit/seal-signatures.js';
import { publicKeyInfo } from '../shared/audit/seal.js';
import { loadConfig } from '../shared/config.js';
import { readAuditSigningKey } from '../shared/secrets.js';
import { isUuid } from '../shared/http.js';
import { isoInstant } from '../shared/iso-instant.js';
import { openAuditStore, openMetadataStore } from '../shared/stores/open-stores.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';

function fail(message: string): never {
  process.stderr.write(`verify-audit: ${message}\n`);
  process.exit(2);
}

/** The trusted key: --public-key (SPKI PEM), else the public half of the service's own key. */
function trustedKey(file: string | undefined, config: ReturnType<typeof loadConfig>): KeyObject {
  if (file !== undefined) {
    try {
      return createPublicKey(readFileSync(file, 'utf8'));
    } catch (err) {
      fail(`cannot read the public key ${file}: ${(err as Error).message}`);
    }
  }
  const own = readAuditSigningKey(config);
  if (own !== null) return own.publicKey;
  fail('no public key: pass --public-key FILE (GET /audit/public-key gives it), or set AUDIT_SIGNING_KEY or DATA_DIR');
}

/** As the API reads since/until (a time without a zone is UTC). */
function instant(raw: string | undefined, name: string, fallback: Date): Date {
  if (raw === undefined) return fallback;
  try {
    return new Date(isoInstant(raw, name, 'Option'));
  } catch (err) {
    fail(`--${name}: ${(err as Error).message}`);
  }
}

const DAY_MS = 24 * 60 * 60 * 1000;

const USAGE = 'usage: npm run verify-audit -- [--since ISO] [--until ISO] [--org UUID] [--public-key FILE]';

/** The options; a mistyped one is bad usage (exit 2), not a problem found (1). */
function options() {
  try {
    return parseArgs({
      options: {
        since: { type: 'string' },
        until: { type: 'string' },
        org: { type: 'string' },
        'public-key': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }).values;
  } catch (err) {
    fail(`${(err as Error).message}\n${USAGE}`);
  }
}

async function main(): Promise<void> {
  const values = options();
  if (values.help === true) {
    process.stdout.write(`${USAGE}\nExits 0 when every org verifies, 1 on a problem, 2 on bad usage or an unreachable store. See docs/api.md, "Offline".\n`);
    process.exit(0);
  }
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    fail((err as Error).message);
  }
  // Opening the embedded store creates one: a mistyped DATA_DIR verified an empty new store and passed.
  if (config.clickhouseUrl === null && !existsSync(join(config.dataDir, 'chdb'))) {
    fail(`no embedded audit store in DATA_DIR (${config.dataDir}): set DATA_DIR to the service's data directory, or CLICKHOUSE_URL`);
  }
  const key = trustedKey(values['public-key'], config);
  const keys = new Map([[publicKeyInfo(key).fingerprint, key]]);
  // By default the retention period less a day: the TTL deletes older entries
  // but keeps their seals, which would then read as entries removed.
  const since = instant(values.since, 'since', new Date(Date.now() - Math.max(0, config.auditRetentionDays - 1) * DAY_MS));
  // Ids are stored lower-case; the metadata store compares them exactly.
  const org = values.org?.toLowerCase();
  if (org !== undefined && !isUuid(org)) fail('--org must be an org id (a UUID)');
  const until = instant(values.until, 'until', new Date(Date.now() + 60_000));
  if (since.getTime() >= until.getTime()) {
    fail(values.since === undefined ? `--until is before the default --since (${since.toISOString()}, the retention period): give --since too` : '--since must be before --until');
  }
  const audit = await openAuditStore(config, true).catch((err: unknown) => fail(`cannot open the audit store: ${(err as Error).message}`));
  let metadata: MetadataStore | null = null;
  if (config.mongodbUrl !== null || existsSync(join(config.dataDir, 'metadata.sqlite'))) {
    metadata = await openMetadataStore(config).catch((err: unknown) => {
      process.stderr.write(`verify-audit: chain heads not checked (metadata store: ${(err as Error).message})\n`);
      return null;
    });
  } else {
    process.stderr.write('verify-audit: chain heads not checked (no metadata store configured): a truncated tail cannot be told\n');
  }
  let bad = 0;
  let entries = 0;
  try {
    // Every org of the audit store, and every org with a recorded chain head: one
    // whose rows and seals were all deleted is still checked (and found truncated).
    const known = [...new Set([...(await audit.orgIds()), ...(metadata === null ? [] : await metadata.sealHeadOrgs())])].sort();
    // An org with neither entries, seals nor a chain head (a mistyped --org) verified as clean.
    if (org !== undefined && !known.includes(org) && (metadata === null || (await metadata.orgCreatedAt(org)) === null)) {
      fail(`--org ${org}: no such organization (no audit entries, seals or chain heads)`);
    }
    const orgs = org !== undefined ? [org] : known;
    for (const orgId of orgs) {
      const heads: ChainHead[] = metadata === null ? [] : await metadata.listSealHeads(orgId);
      const sealingSince = metadata === null ? null : await metadata.sealingSince();
      const orgCreatedAt = metadata === null ? null : await metadata.orgCreatedAt(orgId);
      const result = await verifyAudit(audit, orgId, { since, until, keys, heads, signatureWorkers: COMMAND_SIGNATURE_WORKERS, ...(sealingSince === null ? {} : { sealingSince }), ...(orgCreatedAt === null ? {} : { orgCreatedAt }) });
      entries += result.entries;
      if (!result.ok) bad++;
      process.stdout.write(`${JSON.stringify({ org_id: orgId, ...verifyJson(result) })}\n`);
    }
    process.stdout.write(`${JSON.stringify({ orgs: orgs.length, entries, failed: bad })}\n`);
  } finally {
    await audit.close();
    await metadata?.close();
  }
  process.exit(bad > 0 ? 1 : 0);
}

// A failure that is not a verdict (the store went away mid-run) is no problem found: exit 2, one line.
await main().catch((err: unknown) => fail(`cannot verify: ${(err as Error).message}`));

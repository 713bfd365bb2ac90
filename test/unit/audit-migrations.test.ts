// The audit table's migrations (shared/audit/audit-codec.ts): a table made by an
// earlier version gets the columns added since, and an up-to-date one nothing.
import t from 'tap';
import { AUDIT_COLUMN_NAMES, auditTableDdl, auditTableMigrations } from '../../shared/audit/audit-codec.js';

const RETENTION = 365;
// What the server reports for a table made by auditTableDdl(365).
const ENGINE = "MergeTree PARTITION BY toYYYYMM(timestamp) ORDER BY (org_id, timestamp, id) TTL toDateTime(timestamp) + toIntervalDay(365) SETTINGS non_replicated_deduplication_window = 10000, fsync_after_insert = 1, fsync_part_directory = 1, index_granularity = 8192";

t.test('an up-to-date table needs no statement', async (t) => {
  t.ok(auditTableDdl(RETENTION).includes('mcp_session_id'), 'the DDL has every column');
  t.strictSame(auditTableMigrations(ENGINE, RETENTION, AUDIT_COLUMN_NAMES).filter((q) => q.includes('ADD COLUMN')), []);
});

t.test('a table without mcp_session_id (made before it existed) gets it added, idempotently', async (t) => {
  const old = AUDIT_COLUMN_NAMES.filter((c) => c !== 'mcp_session_id');
  const added = auditTableMigrations(ENGINE, RETENTION, old).filter((q) => q.includes('ADD COLUMN'));
  t.strictSame(added, ['ALTER TABLE audit_log ADD COLUMN IF NOT EXISTS mcp_session_id String']);
});

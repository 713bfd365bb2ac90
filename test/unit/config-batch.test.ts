// The audit batch settings' defaults (shared/config.ts): the interval between
// batches depends on where the audit goes; the stream's poll and the batch
// size are what docs/api.md's 2 s and 1 s promises are made with.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../shared/config.js';

const base = () => ({ DATA_DIR: mkdtempSync(join(tmpdir(), 'tcg-config-')), PORT: '0' });

t.test('at most one batch a second under load, 20,000 rows, the stream polled every 250 ms', async (t) => {
  const config = loadConfig(base());
  t.equal(config.auditBatchIntervalMs, 1000);
  t.equal(config.auditBatchMs, 250);
  t.equal(config.auditBatchRows, 20_000);
  t.equal(config.auditStreamPollMs, 250);
});

t.test('a ClickHouse server gets the same interval (one insert a second, its own advice); 0 is taken when set', async (t) => {
  t.equal(loadConfig({ ...base(), CLICKHOUSE_URL: 'http://127.0.0.1:8123' }).auditBatchIntervalMs, 1000);
  t.equal(loadConfig({ ...base(), CLICKHOUSE_URL: 'http://127.0.0.1:8123', AUDIT_BATCH_INTERVAL_MS: '0' }).auditBatchIntervalMs, 0);
  t.equal(loadConfig({ ...base(), AUDIT_BATCH_INTERVAL_MS: '0' }).auditBatchIntervalMs, 0, 'embedded, set to 0');
});

t.test('a bad interval is refused, naming the variable', async (t) => {
  t.throws(() => loadConfig({ ...base(), AUDIT_BATCH_INTERVAL_MS: '-1' }), /AUDIT_BATCH_INTERVAL_MS/);
});

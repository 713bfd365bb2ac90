// What the embedded ClickHouse (chDB) costs per audit row, by how the batch is
// handed over: inline after the statement (chdb's rawInsert, the way the store
// inserted until 2026-11-25), or read by the engine from a file: INSERT … FROM
// INFILE (which would also insert what waits on standard input), and the
// store's own way since, INSERT … SELECT FROM file() (ClickHouseAuditStore's
// insertEncoded, one parsing thread).
//   node dist/bench/micro/chdb-insert.js [batches, default 6] [rows a batch, default 10000]
// Each way gets a fresh chDB in a temp dir with the audit table's own DDL, and
// BATCHES batches of proxy-shaped rows (one agent, each row its own ids, sealed
// batch ids), inserted one after the other as the batcher does; then the merges
// those parts start are given 8 s. Reported: CPU µs per row of the whole process
// (every thread: the engine's pools and the libuv thread an insert runs on) for
// the inserts, and with the merges. The ways run in turn, twice, so that drift
// shows; compare within one run.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AUDIT_COLUMN_NAMES, encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { ClickHouseAuditStore } from '../../shared/stores/clickhouse/clickhouse-audit-store.js';
import type { AuditRecord } from '../../shared/types.js';
import { proxyRecord } from './audit-records.js';

const BATCHES = Number(process.argv[2] ?? 6);
const ROWS = Number(process.argv[3] ?? 10_000);
const MERGE_WAIT_MS = 8000;

type Way = 'inline (rawInsert)' | 'FROM INFILE' | 'the store: SELECT FROM file()';
const WAYS: readonly Way[] = ['inline (rawInsert)', 'FROM INFILE', 'the store: SELECT FROM file()'];

/** BATCHES bodies of ROWS proxy-shaped lines each, ~14 calls a millisecond. */
function bodies(): Buffer[] {
  const start = Date.now();
  let n = 0;
  return Array.from({ length: BATCHES }, () => {
    const batchId = randomUUID();
    let body = '';
    for (let i = 0; i < ROWS; i++, n++) {
      const id = randomUUID();
      const ms = start + Math.floor(n / 14);
      const record: AuditRecord = { ...proxyRecord, id, requestId: n % 4 === 0 ? randomUUID() : id, latencyMs: n % 7, timestamp: new Date(ms).toISOString(), timestampMs: ms };
      body += encodeAuditRow(record, batchId);
    }
    return Buffer.from(body, 'utf8');
  });
}

function cpuUs(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return used.user + used.system;
}

async function measureWay(way: Way, batches: readonly Buffer[]): Promise<{ insert: number; withMerges: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-chdb-insert-'));
  // The store makes the table; the hand-made ways use the same engine through chdb.
  const store = await ClickHouseAuditStore.open({ url: null, dataDir: dir, retentionDays: 365 });
  await store.close();
  const { createChdbConnection } = await import('chdb/connection');
  const connection = way === 'the store: SELECT FROM file()' ? null : createChdbConnection({ path: join(dir, 'chdb') });
  const reopened = connection === null ? await ClickHouseAuditStore.open({ url: null, dataDir: dir, retentionDays: 365 }) : null;
  try {
    const settings = { insert_deduplicate: 1, input_format_tsv_allow_variable_number_of_columns: 1, async_insert: 0 };
    const started = process.cpuUsage();
    for (const [i, body] of batches.entries()) {
      const token = randomUUID();
      if (reopened !== null) {
        await reopened.insertEncoded({ rows: body.toString('utf8'), seals: '' }, token);
      } else if (way === 'inline (rawInsert)') {
        await connection!.chdb.rawInsert({ table: 'audit_log', columns: AUDIT_COLUMN_NAMES, values: body, format: 'TabSeparated', settings: { ...settings, insert_deduplication_token: token } });
      } else {
        const file = join(dir, `${i}.tsv`);
        writeFileSync(file, body);
        await connection!.chdb.queryAsync(
          `INSERT INTO audit_log (${AUDIT_COLUMN_NAMES.join(', ')}) FROM INFILE '${file}' ` +
            `SETTINGS insert_deduplication_token = '${token}', insert_deduplicate = 1, input_format_tsv_allow_variable_number_of_columns = 1, async_insert = 0, input_format_parallel_parsing = 0 FORMAT TabSeparated`,
        );
      }
    }
    const insert = cpuUs(started);
    await new Promise((resolve) => setTimeout(resolve, MERGE_WAIT_MS));
    const withMerges = cpuUs(started);
    const rows = batches.length * ROWS;
    return { insert: insert / rows, withMerges: withMerges / rows };
  } finally {
    await (reopened ?? connection!).close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const batches = bodies();
console.log(`${BATCHES} batches of ${ROWS} rows (${(batches[0]!.length / ROWS).toFixed(0)} bytes a row); CPU µs per row, whole process`);
console.log('| way | round | inserts | with 8 s of merges |');
console.log('|---|---:|---:|---:|');
for (let round = 1; round <= 2; round++) {
  for (const way of round % 2 === 1 ? WAYS : [...WAYS].reverse()) {
    const { insert, withMerges } = await measureWay(way, batches);
    console.log(`| ${way} | ${round} | ${insert.toFixed(2)} | ${withMerges.toFixed(2)} |`);
  }
}
process.exit(0);

// The audit seal of a batch (shared/audit/seal.ts): the fields the batcher reads
// from each row as it queues it, and the seal over a closed batch, per row.
// `node dist/bench/micro/seal.js`.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { SealColumns, Sealer, signingKeyFromPem } from '../../shared/audit/seal.js';
import { BATCH_SIZE, batchRecords, recordsInEndOrder } from './audit-records.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

const SECOND_ROWS = 6000;

export const measureSeal: MicroCases = () => {
  const sealer = new Sealer(signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()));
  const sealBatchId = randomUUID();
  const sealBatch = batchRecords.map((r) => encodeAuditRow(r, sealBatchId));
  const columnsOf = (lines: string[], records: typeof batchRecords) => {
    const columns = new SealColumns();
    lines.forEach((line, i) => columns.pushFresh(line, records[i]!, sealBatchId));
    return columns;
  };
  const batchColumns = columnsOf(sealBatch, batchRecords);
  const queued = new SealColumns();
  // A second's batch under the bench's load (~6,000 small GETs a second, AUDIT_BATCH_INTERVAL_MS):
  // sealed at once when the batch closes, so its time a row, times 6,000, is the event loop's stall.
  const secondRecords = recordsInEndOrder(SECOND_ROWS);
  const secondColumns = columnsOf(secondRecords.map((r) => encodeAuditRow(r, sealBatchId)), secondRecords);
  return [
    // A batch of 250 rows of one org (AUDIT_BATCH_MS at ~1,000 calls/s; under load a batch holds up to a second's rows), sealed as the batcher closes it: per row.
    // freshSealedFields read 114-146 ns while every case shared hot-path.ts with its fixtures
    // made at the top, and 27 there with --no-allocation-site-pretenuring: V8 had come to
    // allocate its result objects in old space. Here it read ~20 (2026-11-25, measured);
    // since it hashes the row's Merkle leaf (2026-11-26), ~700-1,300, and the seal
    // less by about as much (docs/performance.md, "The seal's stall"). Since the
    // fields are columns (SealColumns, 2026-11-26 afternoon), see docs/performance.md.
    measure('SealColumns.pushFresh (the batcher reads a row\'s seal fields and hashes its Merkle leaf as it queues it; the proxy\'s record has its instant as a number)', (i) => {
      if (i % SECOND_ROWS === 0) queued.clear();
      queued.pushFresh(sealBatch[i % BATCH_SIZE]!, batchRecords[i % BATCH_SIZE]!, sealBatchId);
    }),
    measure('Sealer.sealColumns (per row, 250-row batch of one org, leaves hashed, one Ed25519 signature)', (i) => {
      if (i % BATCH_SIZE === 0) sealer.sealColumns(batchColumns);
    }),
    measure(`Sealer.sealColumns (per row, a second's batch: ${SECOND_ROWS.toLocaleString('en')} rows of one org)`, (i) => {
      if (i % SECOND_ROWS === 0) sealer.sealColumns(secondColumns);
    }),
    measure('Sealer.sealLines (per row, the same from the lines: a batch recovered from the journal)', (i) => {
      if (i % BATCH_SIZE === 0) sealer.sealLines(sealBatch);
    }),
  ];
};

runWhenMain(import.meta.url, measureSeal);

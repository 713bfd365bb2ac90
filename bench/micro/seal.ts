// The audit seal of a batch (shared/audit/seal.ts): the fields the batcher reads
// from each row as it queues it, and the seal over a closed batch, per row.
// `node dist/bench/micro/seal.js`.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { freshSealedFields, Sealer, signingKeyFromPem } from '../../shared/audit/seal.js';
import { BATCH_SIZE, batchRecords } from './audit-records.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

export const measureSeal: MicroCases = () => {
  const sealer = new Sealer(signingKeyFromPem(generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()));
  const sealBatchId = randomUUID();
  const sealBatch = batchRecords.map((r) => encodeAuditRow(r, sealBatchId));
  const sealFields = sealBatch.map((l, i) => freshSealedFields(l, batchRecords[i]!, sealBatchId));
  return [
    // A batch of 250 rows of one org (AUDIT_BATCH_MS at ~1,000 calls/s; under load a batch holds up to a second's rows), sealed as the batcher closes it: per row.
    // freshSealedFields read 114-146 ns while every case shared hot-path.ts with its fixtures
    // made at the top, and 27 there with --no-allocation-site-pretenuring: V8 had come to
    // allocate its result objects in old space. Here it reads ~20 (2026-11-25, measured).
    measure('freshSealedFields (the batcher reads a row\'s seal fields as it queues it; the proxy\'s record has its instant as a number)', (i) => freshSealedFields(sealBatch[i % BATCH_SIZE]!, batchRecords[i % BATCH_SIZE]!, sealBatchId)),
    measure('Sealer.sealFields (per row, 250-row batch of one org, one Ed25519 signature)', (i) => {
      if (i % BATCH_SIZE === 0) sealer.sealFields(sealFields);
    }),
    measure('Sealer.sealLines (per row, the same from the lines: a batch recovered from the journal)', (i) => {
      if (i % BATCH_SIZE === 0) sealer.sealLines(sealBatch);
    }),
  ];
};

runWhenMain(import.meta.url, measureSeal);

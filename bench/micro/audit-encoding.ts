// The audit row of every proxied call: its TSV line (encodeAuditRow, the
// entry_hash included) and the entry hash alone (canonical JSON + SHA-256).
// `node dist/bench/micro/audit-encoding.js`.
import { encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { entryHash } from '../../shared/audit/entry-json.js';
import { BATCH_SIZE, batchRecords } from './audit-records.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

export const measureAuditEncoding: MicroCases = () => [
  // Over the 250 calls below: each its own id and request id, ~14 a millisecond, the
  // agent, tool and rule repeated (the encoders keep each text field's last form).
  measure('encodeAuditRow (entry_hash included)', (i) => encodeAuditRow(batchRecords[i % BATCH_SIZE]!)),
  measure('entryHash (canonical JSON + SHA-256)', (i) => entryHash(batchRecords[i % BATCH_SIZE]!)),
];

runWhenMain(import.meta.url, measureAuditEncoding);

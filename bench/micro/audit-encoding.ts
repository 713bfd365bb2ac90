// The audit row of every proxied call: its TSV line (encodeAuditRow, the
// entry_hash included), the entry hash alone (canonical JSON + SHA-256), and the
// call's instant in ISO form at a moderate rate (each call its own millisecond).
// `node dist/bench/micro/audit-encoding.js`.
import { encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { isoOfMs } from '../../shared/audit/ch-instant.js';
import { entryHash } from '../../shared/audit/entry-json.js';
import { BATCH_SIZE, batchRecords } from './audit-records.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

export const measureAuditEncoding: MicroCases = () => [
  // Over the 250 calls below: each its own id and request id, ~14 a millisecond, the
  // agent, tool and rule repeated (the encoders keep each text field's last form).
  measure('encodeAuditRow (entry_hash included)', (i) => encodeAuditRow(batchRecords[i % BATCH_SIZE]!)),
  measure('entryHash (canonical JSON + SHA-256)', (i) => entryHash(batchRecords[i % BATCH_SIZE]!)),
  // A call every 3 ms: a new millisecond each call, a new second every ~333.
  measure('isoOfMs, each call its own millisecond', (i) => isoOfMs(START + 3 * i)),
  measure('new Date(ms).toISOString(), the same instants', (i) => new Date(START + 3 * i).toISOString()),
];

const START = Date.UTC(2026, 10, 27, 12);

runWhenMain(import.meta.url, measureAuditEncoding);

// The audit journal (shared/audit/audit-journal.ts): every proxied call's row
// is appended before its answer's last bytes go. `node dist/bench/micro/audit-journal.js`.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AuditJournal } from '../../shared/audit/audit-journal.js';
import { encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { proxyRecord } from './audit-records.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

export const measureAuditJournal: MicroCases = () => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-micro-'));
  const { journal } = AuditJournal.open(dir);
  const line = encodeAuditRow(proxyRecord);
  const waiter = { journaled: () => undefined };
  try {
    return [
      // Under load a turn carries about a dozen records (bench/profile/run.sh: ~14,000 calls/s, ~1,100 writes/s).
      measure('journal append + afterWrite (one write(2) per 12 lines, a turn\'s; a segment sealed every 1,200)', (i) => {
        journal.append(line);
        journal.afterWrite(waiter);
        if (i % 12 === 11) journal.flush();
        if (i % 1200 === 1199) journal.seal(`t${i}`);
      }),
    ];
  } finally {
    journal.close();
    rmSync(dir, { recursive: true, force: true });
  }
};

runWhenMain(import.meta.url, measureAuditJournal);

// Start-up recovery of the audit journal (audit-journal.ts): the segments a
// killed process left, records of calls it answered, go to the spool, which
// replays them with their tokens.
import type { Logger } from '../log.js';
import { AuditJournal } from './audit-journal.js';
import type { AuditSpool } from './audit-spool.js';
import { SEAL_LINE_PREFIX, type Sealer, unsealedRows } from './seal.js';

/**
 * Opens the audit journal; what a killed predecessor left in it (records of
 * answered calls) moves to the spool, which replays it with its tokens.
 */
export async function recoverJournal(spool: AuditSpool, dir: string, sealer: Sealer, log: Logger): Promise<AuditJournal> {
  const { journal, recovered } = AuditJournal.open(dir);
  let records = 0;
  for (const batch of recovered) {
    // Already in the spool under its token: a start killed between the spool's
    // write and the segment's forget (an unsealed segment's token is the same at
    // every start, from its lines), or a batch spooled by the process that wrote
    // it, killed before its forget. Spooled again, under a second token, the rows
    // would be written twice.
    if (spool.batches.some((spooled) => spooled.token === batch.token)) {
      journal.forget(batch.segment);
      continue;
    }
    // The batch a killed process had open was never sealed: this process seals it, in its own chain.
    const before = sealer.snapshot();
    // (Or the rows of orgs whose seal lines a kill cut off mid-write.)
    const unsealed = unsealedRows(batch.lines);
    const sealLines = unsealed.length === 0 ? [] : sealer.sealLines(unsealed).lines;
    const lines = sealLines.length === 0 ? batch.lines : batch.lines.concat(sealLines);
    try {
      // Past SPOOL_MAX_BYTES too: the records are on this disk already (the
      // segment is forgotten once they are spooled), and a spool a long outage
      // filled must not keep them from ClickHouse until the next start. Until
      // the spool drains back under its bound the proxy refuses new calls, as
      // it does whenever the spool is full.
      await spool.write(lines, batch.token, false);
    } catch (err) {
      // Its seals are not kept: the chain must not link to them.
      sealer.restore(before);
      // Kept in the journal: the next start tries again (a write that failed on the disk itself).
      log.error('audit records left in the journal could not be spooled; kept for the next start', { records: batch.lines.length, err });
      continue;
    }
    // Once the spool has an unsealed segment's batch, its token and the new seal
    // lines go into the segment too, so that a start that finds it again after
    // the spool replayed it (its unlink refused) spools it with these seals under
    // the same token, which ClickHouse deduplicates, rather than sealing it again
    // in a chain that would then link to seals ClickHouse dropped as duplicates.
    // (Not before the spool write: a failed one restores the
    // sealer, and the segment must not keep seals the chain no longer has.)
    journal.sealRecovered(batch, sealLines);
    journal.forget(batch.segment);
    records += batch.lines.filter((line) => !line.startsWith(SEAL_LINE_PREFIX)).length;
  }
  if (records > 0) log.warn('audit records of a stopped process recovered from its journal', { batches: recovered.length, records });
  return journal;
}

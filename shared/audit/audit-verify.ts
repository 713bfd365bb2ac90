// Verifies an org's audit log against its seals (CONTRACT.md "Tamper-evident
// audit"), for GET /audit/verify and `npm run verify-audit` alike.
//
// What is checked, and the reason each failure is named by:
// - every seal: its hash recomputed from its fields (`seal_altered`), its
//   signature under a trusted key (`seal_altered`; `unknown_key` when signed
//   by a key the verifier does not trust);
// - every chain (org, writer): seqs 1, 2, 3… each linking to the previous
//   seal's hash; a gap is `seal_removed`, a wrong link `seal_altered`; a chain
//   shorter than its recorded head (chain heads, kept outside ClickHouse) is
//   `tail_truncated`;
// - every entry in the window: its fields hash to its entry_hash
//   (`entry_edited`), a seal covers its batch (`entry_added` when none does and
//   the entry is older than the sealing grace), within the seal's time range;
// - every seal meeting the window: the entries of its batch number its count
//   (`entry_removed` / `entry_added`) and their Merkle root in (timestamp, id)
//   order is its root (`root_mismatch`: an entry replaced or reordered, or
//   edited together with its entry_hash).
// Entries without an entry_hash or a batch id are from before entries were
// hashed or sealed: accepted (`legacy`) when older than the org's first seal
// (or when sealing began) and not older than the org, `entry_added` otherwise.
import type { KeyObject } from 'node:crypto';
import type { AuditStore, EntryRef, SealChain, VerifyGroup } from '../stores/audit-store.js';
import { entryHash } from './entry-json.js';
import { LoopSlices } from '../loop-slices.js';
import { GENESIS_HASH, merkleRootOfLeaves, sealBody, type Seal } from './seal.js';
import { checkSignatures, SEAL_HASH_BAD, SEAL_NOT_CHECKED, SEAL_SIGNATURE_BAD, SEAL_UNKNOWN_KEY, sealVerdict, type SealVerdict } from './seal-signatures.js';

export type ProblemReason =
  | 'entry_edited'
  | 'entry_added'
  | 'entry_removed'
  | 'root_mismatch'
  | 'seal_altered'
  | 'seal_removed'
  | 'unknown_key'
  | 'tail_truncated';

export interface Problem {
  reason: ProblemReason;
  auditId?: string;
  sealId?: string;
  /** A sentence for people. */
  detail: string;
  /** Where in time it is (ISO): the first problem is the earliest. */
  at: string;
}

export interface VerifyResult {
  ok: boolean;
  /** The org's entries in the window. */
  entries: number;
  /** The seals meeting the window. */
  seals: number;
  /** Entries in the window not sealed yet (written within the grace). */
  pending: number;
  /** Entries in the window from before entries were hashed. */
  legacy: number;
  firstProblem: Problem | null;
}

/** The last seal of a chain as recorded outside ClickHouse (the metadata store), after it landed. */
export interface ChainHead {
  writer: string;
  seq: number;
  sealHash: string;
}

export interface VerifyOptions {
  since: Date;
  until: Date;
  /** Trusted public keys by fingerprint (seal.ts publicKeyInfo). */
  keys: ReadonlyMap<string, KeyObject>;
  /** The org's chain heads; a chain shorter than its head is truncated. */
  heads?: readonly ChainHead[];
  /** When sealing began (the metadata store keeps it): entries older without a batch id are legacy. Default: the org's first seal. */
  sealingSince?: Date;
  /** When the org was created (the metadata store keeps it): an entry dated earlier is not legacy, the guard did not write it. Default: unknown, no bound. */
  orgCreatedAt?: Date;
  now?: Date;
  /** Entries younger than this may not be sealed yet. */
  graceMs?: number;
  /** Entries read per query (smaller pages let a server's event loop serve calls between them). */
  pageRows?: number;
  /** Worker threads checking the seals' signatures: 1 in a server (the default), COMMAND_SIGNATURE_WORKERS offline. */
  signatureWorkers?: number;
}

/** An entry dated this far past the verifier's clock cannot have been written yet. */
const FUTURE_SKEW_MS = 5 * 60_000;

/** DateTime64's first instant (1900-01-01): no entry is dated earlier. */
const CLICKHOUSE_FIRST_INSTANT = Date.UTC(1900, 0, 1);

/** Candidate mismatches read back in full per query, at most. */
const RECHECK_CHUNK = 1000;
/** Seals read per query. */
const SEAL_PAGE = 5000;

/** A batch is sealed when it closes (AUDIT_BATCH_MS after its first row, at most one per AUDIT_BATCH_INTERVAL_MS under load) and lands with its rows; this covers a slow insert too. */
export const SEAL_GRACE_MS = 60_000;



export async function verifyAudit(store: AuditStore, orgId: string, options: VerifyOptions): Promise<VerifyResult> {
  const now = options.now ?? new Date();
  const graceMs = options.graceMs ?? SEAL_GRACE_MS;
  let problems: Problem[] = [];
  const report = (p: Problem): void => {
    problems.push(p);
  };

  // The seals read are bounded by the window: for each chain, the run of seqs of
  // its seals meeting the window (the store sums them up) plus the seal before
  // (its link). The rest of each chain is checked by the store, in sums: seqs
  // 1..last with no gap, and the last seal against its recorded head.
  // Read by seq (the seals table's key), SEAL_PAGE rows a query: a day of one
  // batch a second is 86,400 seals, and one query of them held the event loop
  // ~0.3 s parsing; spread into push(), over ~120,000 overflowed the stack. The
  // seals meeting the window are found among them, each held once. Its loops run
  // for seconds (a root is ~2 µs a leaf of hashing, a seal's signature 120 µs), so
  // they give way (bench/micro/verify-audit.ts prints the longest wait).
  const slices = new LoopSlices();
  const chains = await store.sealChains(orgId, options);
  const seals: Seal[] = [];
  // One past the run's end too: a seal re-dated out of the window (its entries
  // deleted) would otherwise never be read, and its chain would look whole.
  // For a chain with seals on both sides of the window, the last seal wholly
  // before it and the first wholly after it too: when every seal of the window
  // was re-dated out of it, none met it, and the one of them nearest the window
  // in seq is one of those two (usually they are the run's neighbours anyway).
  for (const chain of chains) {
    let from = chain.meeting === null ? Infinity : chain.meeting.firstSeq - 1;
    let to = chain.meeting === null ? -Infinity : chain.meeting.lastSeq + 1;
    if (chain.beforeSeq > 0 && chain.afterSeq > 0) {
      from = Math.min(from, chain.beforeSeq, chain.afterSeq);
      to = Math.max(to, chain.beforeSeq, chain.afterSeq);
    }
    // Paged by rows, each page from the seq after the last one's: one seal given a
    // seq of 10^12 spans a range of 10^12 seqs, and no other row.
    for (let next = from; next <= to;) {
      const page = await store.sealRange(orgId, chain.writer, next, to, SEAL_PAGE);
      for (const s of page) seals.push(s);
      await slices.turn();
      if (page.length < SEAL_PAGE) break;
      next = page[page.length - 1]!.seq + 1;
      // Past 2^53 a seq + 1 rounds to itself: a page of such seals is the last read.
      if (!Number.isSafeInteger(next)) break;
    }
  }
  // The seals' signatures are checked by a worker while the entries are read
  // and their roots built on the loop; the chains are checked last.
  const stop = { stopped: false };
  const signing = checkSignatures(seals, options.keys, stop, options.signatureWorkers);
  signing.catch(() => undefined); // awaited below; a read failing first must not leave it unhandled
  let meeting: Seal[] = [];
  let entries = 0;
  let pending = 0;
  let legacy = 0;
  try {
    const since = options.since.getTime();
    const until = options.until.getTime();
    // The seals meeting the window, as the store's listSeals orders them (by first_at, then writer and seq).
    // Instants compare as their ISO 8601 text (the store's are toISOString's form).
    const sinceIso = options.since.toISOString();
    const untilIso = options.until.toISOString();
    meeting = seals.filter((s) => s.firstAt < untilIso && s.lastAt >= sinceIso);
    meeting.sort((a, b) => (a.firstAt < b.firstAt ? -1 : a.firstAt > b.firstAt ? 1 : a.writer < b.writer ? -1 : a.writer > b.writer ? 1 : a.seq - b.seq));
    // Every entry of a seal meeting the window is read, so that its root can be recomputed.
    let from = since;
    let to = until;
    for (const s of meeting) {
      from = Math.min(from, Date.parse(s.firstAt));
      to = Math.max(to, Date.parse(s.lastAt) + 1);
    }
    const byBatch = new Map<string, Seal[]>();
    const addSeal = (s: Seal): void => {
      const list = byBatch.get(s.batchId);
      if (list === undefined) byBatch.set(s.batchId, [s]);
      else if (!list.some((x) => x.id === s.id)) list.push(s);
    };
    seals.forEach(addSeal);
    // Entries older than this without a batch id are legacy: the instant sealing began
    // (kept in the metadata store), else the org's first seal.
    const firstSealAt = options.sealingSince?.getTime() ?? chains.reduce((min, c) => Math.min(min, Date.parse(c.firstCreatedAt)), Infinity);
    // Batches merged across pages: pages are time slices in order, so each page's
    // sorted leaves continue the last's.
    const groups = new Map<string | null, VerifyGroup>();
    await store.verifyGroups(orgId, {
      from: new Date(from),
      to: new Date(to),
      since: options.since,
      until: options.until,
      // Less the clock skew allowed between the admin process that created the org and a proxy.
      legacyFrom: new Date(options.orgCreatedAt === undefined ? CLICKHOUSE_FIRST_INSTANT : options.orgCreatedAt.getTime() - FUTURE_SKEW_MS),
      legacyBefore: new Date(Number.isFinite(firstSealAt) ? firstSealAt : now.getTime() + 1),
      graceFrom: new Date(now.getTime() - graceMs),
      graceUntil: new Date(now.getTime() + FUTURE_SKEW_MS),
    }, (page) => {
      for (const g of page) {
        const known = groups.get(g.batchId);
        groups.set(g.batchId, known === undefined ? g : mergeGroups(known, g));
      }
    }, options.pageRows);

    // Batches met in the window whose seal lies outside it (an entry moved in time): their seals.
    const unknown = [...groups.keys()].filter((b): b is string => b !== null && !byBatch.has(b));
    for (let i = 0; i < unknown.length; i += RECHECK_CHUNK) (await store.sealsOfBatches(orgId, unknown.slice(i, i + RECHECK_CHUNK))).forEach(addSeal);

    const candidates: string[] = [];
    for (const g of groups.values()) {
      await slices.turn();
      entries += g.inWindow;
      legacy += g.legacyInWindow;
      if (g.lateUnhashed !== null) {
        report({ reason: 'entry_added', auditId: g.lateUnhashed.id, at: g.lateUnhashed.timestamp, detail: 'The entry has no entry_hash but is dated after sealing began, or before its organization was created.' });
      }
      candidates.push(...g.mismatched);
      const sealsOfBatch = g.batchId === null ? undefined : byBatch.get(g.batchId);
      if (sealsOfBatch === undefined) {
        pending += g.recentInWindow;
        if (g.oldInWindow !== null) report({ reason: 'entry_added', auditId: g.oldInWindow.id, at: g.oldInWindow.timestamp, detail: 'No seal covers the entry\'s batch.' });
        continue;
      }
      for (const s of sealsOfBatch) {
        if (g.first.timestamp < s.firstAt) report({ reason: 'entry_added', auditId: g.first.id, at: g.first.timestamp, sealId: s.id, detail: 'The entry lies before the time range of the seal of its batch.' });
        if (g.last.timestamp > s.lastAt) report({ reason: 'entry_added', auditId: g.last.id, at: g.last.timestamp, sealId: s.id, detail: 'The entry lies after the time range of the seal of its batch.' });
      }
    }

    for (let i = 0; i < candidates.length; i += RECHECK_CHUNK) {
      const chunk = candidates.slice(i, i + RECHECK_CHUNK);
      for (const record of await store.entriesByIds(orgId, chunk)) {
        if (!hashesTo(record)) {
          report({ reason: 'entry_edited', auditId: record.id, at: record.timestamp, detail: 'The entry\'s fields do not hash to its entry_hash.' });
        }
      }
    }

    // A root is ~2 µs a leaf of hashing: a million entries hold the event loop for seconds.
    for (const s of meeting) {
      await slices.turn();
      const leaves = groups.get(s.batchId)?.leaves ?? [];
      if (leaves.length < s.count) {
        report({ reason: 'entry_removed', sealId: s.id, at: s.firstAt, detail: `The seal covers ${s.count} entries; ${leaves.length} remain.` });
      } else if (leaves.length > s.count) {
        report({ reason: 'entry_added', sealId: s.id, at: s.firstAt, detail: `The seal covers ${s.count} entries; its batch now has ${leaves.length}.` });
      } else if (merkleRootOfLeaves(leaves) !== s.root) {
        report({ reason: 'root_mismatch', sealId: s.id, at: s.firstAt, detail: 'The entries of the seal\'s batch are not the ones it sealed, in that order (replaced, reordered, or edited with their entry_hash).' });
      }
    }

    // An entry dated ahead of the clock sorts first in GET /audit but lies past any window ending now.
    const ahead = await store.list(orgId, { since: new Date(now.getTime() + FUTURE_SKEW_MS).toISOString() }, 1, 0);
    if (ahead.total > 0) {
      report({ reason: 'entry_added', auditId: ahead.rows[0]!.id, at: ahead.rows[0]!.timestamp, detail: `${ahead.total} entr${ahead.total === 1 ? 'y is' : 'ies are'} dated more than 5 minutes ahead of the verifier's clock.` });
    }

    // The chains' problems go first, as when they were checked first: of problems
    // at one instant (a seal's and its batch's), the seal's is named.
    const chainProblems: Problem[] = [];
    // A worker that failed (it exited, or could not start) leaves every signature to checkSeal, on the loop.
    const signed = await signing.catch(() => {
      stop.stopped = true; // the other lanes hand over no more batches
      return new Uint8Array(seals.length);
    });
    await checkChains(store, orgId, seals, signed, chains, options, (p) => chainProblems.push(p));
    problems = chainProblems.concat(problems); // not unshift(...): a window may hold 100,000 of them
  } finally {
    stop.stopped = true; // a verification that failed leaves no checks running
  }

  problems.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
  return { ok: problems.length === 0, entries, seals: meeting.length, pending, legacy, firstProblem: problems[0] ?? null };
}

/** One batch's group from two consecutive pages. */
function mergeGroups(a: VerifyGroup, b: VerifyGroup): VerifyGroup {
  const earliest = (x: EntryRef | null, y: EntryRef | null) => (x === null ? y : y === null ? x : y.timestamp < x.timestamp ? y : x);
  return {
    batchId: a.batchId,
    count: a.count + b.count,
    inWindow: a.inWindow + b.inWindow,
    first: a.first,
    last: b.last,
    leaves: a.leaves.concat(b.leaves),
    legacyInWindow: a.legacyInWindow + b.legacyInWindow,
    lateUnhashed: earliest(a.lateUnhashed, b.lateUnhashed),
    mismatched: a.mismatched.concat(b.mismatched),
    recentInWindow: a.recentInWindow + b.recentInWindow,
    oldInWindow: earliest(a.oldInWindow, b.oldInWindow),
  };
}

/**
 * Each seal read (the window's and their neighbours): its hash and signature,
 * and its link to the seal before; each chain of the org as the store sums it
 * up: seqs from 1 with no gap and no repeat, and its end against the head
 * recorded outside ClickHouse.
 */
async function checkChains(store: AuditStore, orgId: string, seals: readonly Seal[], signed: Uint8Array, chains: readonly SealChain[], options: VerifyOptions, report: (p: Problem) => void): Promise<void> {
  // An org whose calls come one a batch has a seal per entry, 86,400 a day and
  // writer, each 120 µs of Ed25519 here: a day's held the event loop 12 s. The
  // signatures were checked off the loop (`signed`, checkSignatures).
  const bySeq = new Map<string, Seal>();
  const slices = new LoopSlices();
  for (let i = 0; i < seals.length; i++) {
    const s = seals[i]!;
    await slices.turn();
    const verdict = signed[i]!;
    checkSeal(s, options.keys, report, verdict === SEAL_NOT_CHECKED ? undefined : (verdict as SealVerdict));
    bySeq.set(`${s.writer}:${s.seq}`, s);
  }
  for (const s of seals) {
    const prev = bySeq.get(`${s.writer}:${s.seq - 1}`);
    if (s.seq === 1 ? s.prevHash !== GENESIS_HASH : prev !== undefined && s.prevHash !== prev.sealHash) {
      report({ reason: 'seal_altered', sealId: s.id, at: s.firstAt, detail: 'The seal does not link to the seal before it in its chain.' });
    }
  }
  const byWriter = new Map(chains.map((c) => [c.writer, c]));
  for (const chain of chains) {
    if (chain.count > chain.distinctSeqs) {
      report({ reason: 'seal_altered', at: chain.firstCreatedAt, detail: `Writer ${chain.writer}'s chain has two seals with one seq.` });
    }
    // Seqs run from 1 to the last with none missing. A row numbered 0 (any
    // junk dated out of every window) must not fill in the count of a seal removed.
    const gap = chain.firstSeq > 1 ? chain.firstSeq : chain.distinctSeqs !== chain.lastSeq - chain.firstSeq + 1 ? await store.firstSealGap(orgId, chain.writer, 1) : null;
    if (gap !== null) {
      // Named by the seal after the gap; placed in time after the seal before it.
      const after = (await store.sealRange(orgId, chain.writer, gap, gap))[0];
      // Past 2^53 a seq cannot be named exactly (gap - 2 rounds): the seal before is not looked for.
      const before = gap > 2 && Number.isSafeInteger(gap) ? (await store.sealRange(orgId, chain.writer, gap - 2, gap - 2))[0] : undefined;
      report({ reason: 'seal_removed', sealId: after?.id, at: before?.lastAt ?? '', detail: `Seal ${gap - 1} of writer ${chain.writer} is missing.` });
    }
  }
  for (const head of options.heads ?? []) {
    const chain = byWriter.get(head.writer);
    if (chain === undefined || chain.lastSeq < head.seq) {
      const last = chain === undefined ? undefined : (await store.sealRange(orgId, head.writer, chain.lastSeq, chain.lastSeq))[0];
      report({ reason: 'tail_truncated', sealId: last?.id, at: last?.lastAt ?? '', detail: `Writer ${head.writer}'s chain ends at seal ${chain?.lastSeq ?? 0}; seal ${head.seq} was recorded as written.` });
      continue;
    }
    let atHead = bySeq.get(`${head.writer}:${head.seq}`);
    if (atHead === undefined) {
      // Not read with the window's seals: its fields are checked here (a head
      // re-dated out of every window, its entries deleted, keeps its seal_hash).
      atHead = (await store.sealRange(orgId, head.writer, head.seq, head.seq))[0];
      if (atHead !== undefined) checkSeal(atHead, options.keys, report);
    }
    if (atHead !== undefined && atHead.sealHash !== head.sealHash) {
      report({ reason: 'seal_altered', sealId: atHead.id, at: atHead.firstAt, detail: 'The seal differs from the one recorded as its chain\'s head.' });
    }
  }
}

/** A seal's hash, recomputed from its fields, and its signature under a trusted key (`verdict`: when a worker already checked them). */
function checkSeal(s: Seal, keys: ReadonlyMap<string, KeyObject>, report: (p: Problem) => void, verdict: SealVerdict = sealVerdict(sealBody(s), s, keys)): void {
  if (verdict === SEAL_HASH_BAD) {
    report({ reason: 'seal_altered', sealId: s.id, at: s.firstAt, detail: 'The seal\'s fields do not hash to its seal_hash.' });
  } else if (verdict === SEAL_UNKNOWN_KEY) {
    report({ reason: 'unknown_key', sealId: s.id, at: s.firstAt, detail: `The seal is signed by a key this verifier does not trust (fingerprint ${s.keyFingerprint}).` });
  } else if (verdict === SEAL_SIGNATURE_BAD) {
    report({ reason: 'seal_altered', sealId: s.id, at: s.firstAt, detail: 'The seal\'s signature does not verify.' });
  }
}

/** Whether an entry's fields hash to its entry_hash; a field no writer could have written (an integer past 2^53) does not. */
function hashesTo(record: Parameters<typeof entryHash>[0]): boolean {
  try {
    return entryHash(record) === record.entryHash;
  } catch {
    return false;
  }
}

/** The result as the API returns it. */
export function verifyJson(r: VerifyResult) {
  return {
    ok: r.ok,
    entries: r.entries,
    seals: r.seals,
    pending: r.pending,
    legacy: r.legacy,
    first_problem: r.firstProblem === null ? null : {
      ...(r.firstProblem.auditId !== undefined ? { audit_id: r.firstProblem.auditId } : {}),
      ...(r.firstProblem.sealId !== undefined ? { seal_id: r.firstProblem.sealId } : {}),
      reason: r.firstProblem.reason,
      detail: r.firstProblem.detail,
    },
  };
}

// Audit seals (CONTRACT.md "Tamper-evident audit"): one per organization per
// batch, over the entry hashes of that org's rows in the batch.
//
// A seal records the RFC 6962 Merkle root of the entry hashes in (timestamp, id)
// order, the hash of the previous seal of the same org and writer (one chain per
// org and writing process), the count and time range, and an Ed25519 signature
// over its canonical JSON. It is made when the batcher closes a batch, from the
// seal columns it filled as it queued the batch's rows (SealColumns; a batch
// recovered from the journal, from its lines), and travels with the rows as extra
// lines at the batch's end
// (the spool, its replay and the insert's deduplication token carry both); the
// store writes those lines to the seals table.
//
// This file is the format, pure functions over it, and the Sealer that keeps the
// chains of one process. Verification is in audit-verify.ts.
import { chFromIso, isoFromCh } from './ch-instant.js';
import { createPrivateKey, createPublicKey, hash, randomUUID, sign, type KeyObject } from 'node:crypto';

/** A batch's seal lines start with this, after all its rows (a row starts with a UUID). */
export const SEAL_LINE_PREFIX = '#audit-seal\t';

/** The previous-seal hash of a chain's first seal. */
export const GENESIS_HASH = '0'.repeat(64);

/** The seal format's version, signed with it. */
export const SEAL_VERSION = 1;

export interface Seal {
  id: string;
  orgId: string;
  /** The writing process's chain id (a UUID made at its start). */
  writer: string;
  /** 1 for a chain's first seal, then one more per seal. */
  seq: number;
  /** The batch_id its entries carry. */
  batchId: string;
  /** The earliest and latest entry timestamp, ISO 8601 with milliseconds. */
  firstAt: string;
  lastAt: string;
  count: number;
  /** Lowercase hex RFC 6962 Merkle tree hash over the entry hashes. */
  root: string;
  prevHash: string;
  keyFingerprint: string;
  createdAt: string;
  /** Lowercase hex SHA-256 of the canonical body (sealBody). */
  sealHash: string;
  /** Base64 Ed25519 signature of the canonical body. */
  signature: string;
}

/** The seal as the API returns it (GET /audit/seals). */
export function sealJson(s: Seal) {
  return {
    id: s.id,
    org_id: s.orgId,
    writer: s.writer,
    seq: s.seq,
    batch_id: s.batchId,
    first_at: s.firstAt,
    last_at: s.lastAt,
    count: s.count,
    root: s.root,
    prev_hash: s.prevHash,
    seal_hash: s.sealHash,
    signature: s.signature,
    key_fingerprint: s.keyFingerprint,
    created_at: s.createdAt,
  };
}

/**
 * What is hashed and signed: RFC 8785 canonical JSON of the seal without
 * seal_hash and signature (keys sorted; every value a string or a safe
 * integer, whose canonical forms are JSON.stringify's).
 */
export function sealBody(s: Omit<Seal, 'sealHash' | 'signature'>): string {
  return JSON.stringify({
    batch_id: s.batchId,
    count: s.count,
    created_at: s.createdAt,
    first_at: s.firstAt,
    id: s.id,
    key_fingerprint: s.keyFingerprint,
    last_at: s.lastAt,
    org_id: s.orgId,
    prev_hash: s.prevHash,
    root: s.root,
    seq: s.seq,
    v: SEAL_VERSION,
    writer: s.writer,
  });
}

// ---- RFC 6962 Merkle tree hash --------------------------------------------

const EMPTY_ROOT = hash('sha256', '', 'hex');

/**
 * RFC 6962 §2.1 over leaves given as lowercase hex SHA-256 (the entry hashes,
 * as 32 raw bytes each): leaf = SHA-256(0x00 ‖ d), node = SHA-256(0x01 ‖ l ‖ r),
 * split at the largest power of two below n. Computed bottom-up, which gives
 * the same tree: an odd node at the end of a level is carried up unchanged.
 */
export function merkleRoot(leaves: readonly string[]): string {
  return leaves.length === 0 ? EMPTY_ROOT : rootOf(leaves.map(leafHash));
}

/** One reused input for leafHash: 0x00 then the entry hash's 32 bytes. */
const LEAF_INPUT = Buffer.alloc(33);
/** One reused input for a node's hash: 0x01 then its children's 32 bytes each (written, then hashed, in one go: never across an await). */
const NODE_INPUT = Buffer.alloc(65, 1);

/** RFC 6962's leaf hash of an entry hash (lowercase hex), SHA-256(0x00 ‖ d), as a 32-character latin1 string (rootOf's leaves). */
export function leafHash(entryHashHex: string): string {
  LEAF_INPUT.write(entryHashHex, 1, 32, 'hex');
  return hash('sha256', LEAF_INPUT, 'binary');
}

/** The same root from the leaf hashes (base64 SHA-256(0x00 ‖ entry hash)), as the store computes them. */
export function merkleRootOfLeaves(leafHashes: readonly string[]): string {
  return leafHashes.length === 0 ? EMPTY_ROOT : rootOf(leafHashes.map((b64) => Buffer.from(b64, 'base64').toString('latin1')));
}

/**
 * The tree over leaf hashes held as 32-character latin1 strings (one byte a
 * character): node's hash() returns a string three times faster than a Buffer
 * (measured, Node 20, 33-byte input: 230 against 740 ns, the Buffer's
 * allocation), and a node's input is written into one reused buffer.
 */
function rootOf(leaves: string[]): string {
  return run(rootSteps(leaves));
}

/**
 * Node hashes between two yields of a seal's steps (Sealer.sealSteps): ~0.3 ms
 * of the event loop at ~0.25 µs a hash. The batcher runs one slice a turn, so
 * a second's rows under load (~20,000 in the bench) no longer hold the loop for
 * ~15 ms at once (docs/performance.md, "The audit's seals, a slice a turn").
 */
export const SEAL_SLICE_HASHES = 1024;

/** A generator driven to its end at once: the synchronous form of a seal's steps. */
function run<T>(steps: Generator<void, T>): T {
  for (;;) {
    const step = steps.next();
    if (step.done === true) return step.value;
  }
}

/** rootOf as steps: yields after every SEAL_SLICE_HASHES hashes. */
function* rootSteps(leaves: string[]): Generator<void, string> {
  let level = leaves;
  let hashes = 0;
  while (level.length > 1) {
    const next: string[] = [];
    for (let i = 0; i + 1 < level.length; i += 2) {
      NODE_INPUT.write(level[i]!, 1, 32, 'latin1');
      NODE_INPUT.write(level[i + 1]!, 33, 32, 'latin1');
      next.push(hash('sha256', NODE_INPUT, 'binary'));
      if (++hashes % SEAL_SLICE_HASHES === 0) yield;
    }
    if (level.length % 2 === 1) next.push(level[level.length - 1]!);
    level = next;
  }
  return Buffer.from(level[0]!, 'latin1').toString('hex');
}

// ---- The signing key --------------------------------------------------------

export interface SigningKey {
  privateKey: KeyObject;
  publicKey: KeyObject;
  /** SPKI PEM of the public key (GET /audit/public-key). */
  publicPem: string;
  /** Lowercase hex SHA-256 of the public key's SPKI DER. */
  fingerprint: string;
}

/** An Ed25519 key from PKCS#8 PEM; throws a message naming what is wrong (never the key). */
export function signingKeyFromPem(pem: string): SigningKey {
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(pem);
  } catch {
    throw new Error('the audit signing key is not a PKCS#8 PEM private key');
  }
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new Error('the audit signing key must be an Ed25519 key');
  const publicKey = createPublicKey(privateKey);
  return { privateKey, publicKey, ...publicKeyInfo(publicKey) };
}

export function publicKeyInfo(publicKey: KeyObject): { publicPem: string; fingerprint: string } {
  return {
    publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    fingerprint: hash('sha256', publicKey.export({ type: 'spki', format: 'der' }), 'hex'),
  };
}

// ---- A batch's seal fields, a column each -----------------------------------

/** A row's id as the seal's ties compare it: a UUID's 36 characters (the id column takes nothing else). */
const ID_BYTES = 36;
const LEAF_BYTES = 32;
const INITIAL_ROWS = 1024;

/** A 64-character lowercase hex string (checked without a regular expression: this runs per row). */
function isHex64(s: string): boolean {
  if (s.length !== 64) return false;
  for (let i = 0; i < 64; i++) {
    const c = s.charCodeAt(i);
    if (!((c >= 48 && c <= 57) || (c >= 97 && c <= 102))) return false;
  }
  return true;
}

/** The shape of a UUID's text: 36 characters, dashes at 8, 13, 18 and 23 (the column type checks the rest). */
function looksLikeUuid(s: string): boolean {
  return s.length === 36 && s.charCodeAt(8) === 45 && s.charCodeAt(13) === 45 && s.charCodeAt(18) === 45 && s.charCodeAt(23) === 45;
}

/**
 * A row line's sealed fields: id, timestamp and org_id are its first three
 * columns, entry_hash and batch_id its last two (audit-codec.ts puts them
 * there). null for a line an earlier version wrote (no hash or batch id): it
 * stays unsealed, as rows from before seals do.
 */
function rowFields(line: string): { id: string; ms: number; orgId: string; entryHash: string; batchId: string } | null {
  const t1 = line.indexOf('\t');
  const t2 = line.indexOf('\t', t1 + 1);
  const t3 = line.indexOf('\t', t2 + 1);
  const end = line.endsWith('\n') ? line.length - 1 : line.length;
  const b = line.lastIndexOf('\t', end - 1);
  const h = line.lastIndexOf('\t', b - 1);
  if (t1 < 0 || t2 < 0 || t3 < 0 || h <= t3) return null;
  const entryHash = line.slice(h + 1, b);
  const batchId = line.slice(b + 1, end);
  if (!isHex64(entryHash) || !looksLikeUuid(batchId)) return null;
  const ms = Date.parse(isoFromCh(line.slice(t1 + 1, t2)));
  if (Number.isNaN(ms)) return null;
  return { id: line.slice(0, t1), ms, orgId: line.slice(t2 + 1, t3), entryHash, batchId };
}

/**
 * What a batch's seals need of its rows, a column each: the instant, the id
 * (for ties), the org and batch, and the Merkle leaf. The leaf,
 * SHA-256(0x00 ‖ entry hash), is hashed as the row is queued: half of a seal's
 * hashes are its leaves, and made here they are spread over the calls instead
 * of stalling the event loop all at once when the batch closes (at a second's
 * rows of the bench's load, ~6,000, that stall was ~15 ms; bench/micro/seal.ts).
 *
 * Typed arrays and shared strings, not an object a row, and the batcher clears
 * and reuses one instance: a batch's rows live a second under load, and an
 * object, a leaf string and a boxed number a row outlived two scavenges and
 * were promoted garbage (a sampling heap profile of the split proxy: ~110
 * bytes a call, a quarter of what it promoted once the rows went off the heap,
 * row-bytes.ts).
 */
export class SealColumns {
  count = 0;
  #ms = new Float64Array(INITIAL_ROWS);
  #ids = Buffer.alloc(INITIAL_ROWS * ID_BYTES);
  #leaves = Buffer.alloc(INITIAL_ROWS * LEAF_BYTES);
  readonly #orgs: string[] = [];
  readonly #batches: string[] = [];

  /**
   * A row the batcher's encoder has just made from `record` in batch `batchId`
   * (36 characters): read by position, without the checks pushLine makes of
   * lines read back from a journal. A test keeps the two in agreement.
   */
  pushFresh(line: string, record: { id: string; orgId: string; timestamp: string; timestampMs?: number }, batchId: string): void {
    const hashEnd = line.length - batchId.length - 2; // before "\t<batch id>\n"
    // The id is read from the line, whose first field is the record's id (a
    // UUID, unescaped: the column takes nothing else): slicing the hash has
    // just made the line flat, while the record's id is a string of ~20 pieces
    // (randomUUID) that reading it a character at a time would walk each time.
    this.#push(record.timestampMs ?? Date.parse(record.timestamp), line, record.id.length, record.orgId, batchId, line.slice(hashEnd - 64, hashEnd));
  }

  /** A row line read back (a recovered journal segment); false for a line an earlier version wrote, which stays unsealed. */
  pushLine(line: string): boolean {
    const f = rowFields(line);
    if (f === null) return false;
    this.#push(f.ms, line, f.id.length, f.orgId, f.batchId, f.entryHash);
    return true;
  }

  /** `line` starts with the row's id, `idLength` characters. */
  #push(ms: number, line: string, idLength: number, orgId: string, batchId: string, entryHashHex: string): void {
    const leaf = leafHash(entryHashHex);
    const i = this.count;
    if (i === this.#ms.length) this.#grow();
    this.#ms[i] = ms;
    // Copied a character at a time: for 32 and 36 bytes that is several times
    // cheaper than Buffer#write's call into C++ (bench/micro/seal.ts, pushFresh).
    const ids = this.#ids;
    const at = i * ID_BYTES;
    const idBytes = Math.min(idLength, ID_BYTES);
    for (let k = 0; k < idBytes; k++) ids[at + k] = line.charCodeAt(k);
    for (let k = idBytes; k < ID_BYTES; k++) ids[at + k] = 0; // shorter: sorts before its extensions, as text does
    const leaves = this.#leaves;
    const leafAt = i * LEAF_BYTES;
    for (let k = 0; k < LEAF_BYTES; k++) leaves[leafAt + k] = leaf.charCodeAt(k);
    this.#orgs[i] = orgId;
    this.#batches[i] = batchId;
    this.count = i + 1;
  }

  #grow(): void {
    const rows = this.#ms.length * 2;
    const ms = new Float64Array(rows);
    ms.set(this.#ms);
    const ids = Buffer.alloc(rows * ID_BYTES);
    this.#ids.copy(ids);
    const leaves = Buffer.alloc(rows * LEAF_BYTES);
    this.#leaves.copy(leaves);
    this.#ms = ms;
    this.#ids = ids;
    this.#leaves = leaves;
  }

  /**
   * Forgets the rows (the batch is sealed); the columns are kept for the next
   * batch, the arrays of strings at their length too (truncated, each batch
   * would grow them again: ~130 KB of promoted garbage a second's batch).
   */
  clear(): void {
    this.count = 0;
  }

  orgAt(i: number): string {
    return this.#orgs[i]!;
  }

  batchAt(i: number): string {
    return this.#batches[i]!;
  }

  msAt(i: number): number {
    return this.#ms[i]!;
  }

  /** Row i as a seal reads it (tests): the leaf as 32 latin1 characters. */
  row(i: number): { id: string; ms: number; orgId: string; batchId: string; leaf: string } {
    const at = i * ID_BYTES;
    const id = this.#ids.toString('latin1', at, at + ID_BYTES).replace(/\0+$/, '');
    return { id, ms: this.#ms[i]!, orgId: this.#orgs[i]!, batchId: this.#batches[i]!, leaf: this.#leaves.toString('latin1', i * LEAF_BYTES, (i + 1) * LEAF_BYTES) };
  }

  /** (timestamp, id) of rows a and b, compared; ids as their text (one byte a character). */
  #compare(a: number, b: number): number {
    const d = this.#ms[a]! - this.#ms[b]!;
    if (d !== 0) return d;
    const ids = this.#ids;
    for (let k = 0, x = a * ID_BYTES, y = b * ID_BYTES; k < ID_BYTES; k++, x++, y++) {
      if (ids[x] !== ids[y]) return ids[x]! - ids[y]!;
    }
    return 0;
  }

  /**
   * The given rows in (timestamp, id) order, the order a seal's leaves are in.
   * They are queued as calls end, so they come nearly in order, each early by
   * at most its call's latency, and many share a millisecond: a counting sort
   * on the milliseconds, then an insertion sort of each millisecond's few rows
   * by id, is about six times cheaper than a general sort here
   * (bench/micro/seal.ts); rows spread thin over time get the general one.
   */
  order(rows: readonly number[]): readonly number[] {
    const n = rows.length;
    const msOf = this.#ms;
    let sorted = true;
    let whole = true;
    let min = Infinity;
    let max = -Infinity;
    for (let i = 0; i < n; i++) {
      const ms = msOf[rows[i]!]!;
      if (!Number.isSafeInteger(ms)) whole = false;
      if (ms < min) min = ms;
      if (ms > max) max = ms;
      if (sorted && i > 0 && this.#compare(rows[i - 1]!, rows[i]!) > 0) sorted = false;
    }
    if (sorted) return rows;
    const range = max - min + 1;
    // Milliseconds that are not whole numbers (never from the proxy) or spread thin: the general sort.
    if (!whole || !(range <= 4 * n + 1024)) return [...rows].sort((a, b) => this.#compare(a, b));
    const starts = new Uint32Array(range + 1);
    for (let i = 0; i < n; i++) starts[msOf[rows[i]!]! - min + 1]! += 1;
    for (let k = 1; k <= range; k++) starts[k]! += starts[k - 1]!;
    const out = new Array<number>(n);
    const next = starts.slice(0, range);
    for (let i = 0; i < n; i++) {
      const r = rows[i]!;
      out[next[msOf[r]! - min]!++] = r;
    }
    // Within one millisecond, by id (a handful of rows: insertion sort).
    for (let k = 0; k < range; k++) {
      const from = starts[k]!;
      const to = starts[k + 1]!;
      for (let i = from + 1; i < to; i++) {
        const r = out[i]!;
        let j = i - 1;
        while (j >= from && this.#compare(out[j]!, r) > 0) {
          out[j + 1] = out[j]!;
          j--;
        }
        out[j + 1] = r;
      }
    }
    return out;
  }

  /** RFC 6962's root (lowercase hex) over the rows' leaves in the given order (at least one row), in steps: yields after every SEAL_SLICE_HASHES hashes (the rows must not change meanwhile). */
  *rootSteps(order: readonly number[]): Generator<void, string> {
    const leaves = this.#leaves;
    const leafText = (r: number) => leaves.toString('latin1', r * LEAF_BYTES, (r + 1) * LEAF_BYTES);
    if (order.length === 1) return yield* rootSteps([leafText(order[0]!)]);
    // The first level reads the leaves from their column; rootSteps takes the rest.
    const level: string[] = [];
    for (let i = 0; i + 1 < order.length; i += 2) {
      const a = order[i]! * LEAF_BYTES;
      const b = order[i + 1]! * LEAF_BYTES;
      for (let k = 0; k < LEAF_BYTES; k++) {
        NODE_INPUT[1 + k] = leaves[a + k]!;
        NODE_INPUT[1 + LEAF_BYTES + k] = leaves[b + k]!;
      }
      level.push(hash('sha256', NODE_INPUT, 'binary'));
      if (level.length % SEAL_SLICE_HASHES === 0) yield;
    }
    if (order.length % 2 === 1) level.push(leafText(order[order.length - 1]!));
    yield;
    return yield* rootSteps(level);
  }
}


// ---- Seal lines: a seal as a TabSeparated row of the seals table ------------

/** The seals table's columns, in insert order, with the Seal field each carries. */
export const SEAL_COLUMNS = [
  ['id', 'UUID', 'id'],
  ['org_id', 'UUID', 'orgId'],
  ['writer', 'UUID', 'writer'],
  ['seq', 'UInt64', 'seq'],
  ['batch_id', 'UUID', 'batchId'],
  ['first_at', "DateTime64(3, 'UTC')", 'firstAt'],
  ['last_at', "DateTime64(3, 'UTC')", 'lastAt'],
  ['count', 'UInt32', 'count'],
  ['root', 'String', 'root'],
  ['prev_hash', 'String', 'prevHash'],
  ['key_fingerprint', 'String', 'keyFingerprint'],
  ['created_at', "DateTime64(3, 'UTC')", 'createdAt'],
  ['seal_hash', 'String', 'sealHash'],
  ['signature', 'String', 'signature'],
] as const satisfies readonly (readonly [string, string, keyof Seal])[];

const INSTANT_FIELDS: ReadonlySet<keyof Seal> = new Set(['firstAt', 'lastAt', 'createdAt']);

/** Each seals-table column's position in a seal line (after the prefix). */
const SEAL_COLUMN_AT = Object.fromEntries(SEAL_COLUMNS.map(([name], i) => [name, i])) as Record<(typeof SEAL_COLUMNS)[number][0], number>;

/** A seal line's (or a seals-table TSV row's) fields, in SEAL_COLUMNS order. */
function sealLineFields(line: string): string[] {
  return (line.startsWith(SEAL_LINE_PREFIX) ? line.slice(SEAL_LINE_PREFIX.length) : line).replace(/\n$/, '').split('\t');
}

/** A seal as a line of a batch (SEAL_LINE_PREFIX, then its TabSeparated row). No field needs escaping. */
export function encodeSealLine(s: Seal): string {
  return SEAL_LINE_PREFIX + SEAL_COLUMNS.map(([, , field]) => {
    const v = s[field];
    return INSTANT_FIELDS.has(field) ? chFromIso(String(v)) : String(v);
  }).join('\t') + '\n';
}

/** A seal from a row of the seals table as JSONEachRow returns it. */
export function decodeSealRow(row: Record<string, string | number>): Seal {
  const seal: Record<string, string | number> = {};
  for (const [column, , field] of SEAL_COLUMNS) {
    const v = row[column]!;
    seal[field] = INSTANT_FIELDS.has(field) ? isoFromCh(String(v)) : field === 'seq' || field === 'count' ? Number(v) : String(v);
  }
  return seal as unknown as Seal;
}

/** Where the next seal line at or after `from` starts (a line start), or -1. */
function nextSealLine(body: string, from: number): number {
  if (from === 0 && body.startsWith(SEAL_LINE_PREFIX)) return 0;
  const at = body.indexOf('\n' + SEAL_LINE_PREFIX, from === 0 ? 0 : from - 1);
  return at === -1 ? -1 : at + 1;
}

/**
 * Splits a batch body into its rows and its seals' rows (without the prefix),
 * both ready for TabSeparated inserts. A batch's seal lines follow its rows; a
 * body of several batches (a bulk load) may interleave them, which is read too.
 */
export function splitBatchBody(body: string): { rows: string; seals: string } {
  let at = nextSealLine(body, 0);
  if (at === -1) return { rows: body, seals: '' };
  let rows = '';
  let seals = '';
  let from = 0;
  while (at !== -1) {
    rows += body.slice(from, at);
    const end = body.indexOf('\n', at) + 1 || body.length;
    seals += body.slice(at + SEAL_LINE_PREFIX.length, end);
    from = end;
    at = nextSealLine(body, from);
  }
  return { rows: rows + body.slice(from), seals };
}

/** A batch's seal lines as rows of the seals table (without the prefix), as splitBatchBody gives them. */
export function sealRows(lines: readonly string[]): string {
  let rows = '';
  for (const line of lines) rows += line.slice(SEAL_LINE_PREFIX.length);
  return rows;
}

/** How many of a body's lines are seal lines. */
export function countSealLines(body: string): number {
  let n = 0;
  for (let at = nextSealLine(body, 0); at !== -1; at = nextSealLine(body, at + 1)) n++;
  return n;
}

/**
 * The row lines of a recovered journal segment that none of its seal lines
 * covers (by org and batch): all of them when it has none, the rest of a batch
 * whose seal lines a kill cut short.
 */
export function unsealedRows(lines: readonly string[]): string[] {
  const covered = new Set<string>();
  for (const line of lines) {
    if (!line.startsWith(SEAL_LINE_PREFIX)) continue;
    const f = sealLineFields(line);
    covered.add(`${f[SEAL_COLUMN_AT.org_id]}:${f[SEAL_COLUMN_AT.batch_id]}`);
  }
  return lines.filter((line) => {
    if (line.startsWith(SEAL_LINE_PREFIX)) return false;
    const f = rowFields(line);
    return f !== null && !covered.has(`${f.orgId}:${f.batchId}`);
  });
}

/** The chain heads a batch body's seal lines carry: per (org, writer), the highest seq. */
export function sealHeadsOf(body: string): { org_id: string; writer: string; seq: number; seal_hash: string; at: string }[] {
  const { seals } = splitBatchBody(body);
  const heads = new Map<string, { org_id: string; writer: string; seq: number; seal_hash: string; at: string }>();
  for (const line of seals.split('\n')) {
    if (line.length === 0) continue;
    const f = sealLineFields(line);
    const head = { org_id: f[SEAL_COLUMN_AT.org_id]!, writer: f[SEAL_COLUMN_AT.writer]!, seq: Number(f[SEAL_COLUMN_AT.seq]), seal_hash: f[SEAL_COLUMN_AT.seal_hash]!, at: new Date().toISOString() };
    const known = heads.get(`${head.org_id}:${head.writer}`);
    if (known === undefined || known.seq < head.seq) heads.set(`${head.org_id}:${head.writer}`, head);
  }
  return [...heads.values()];
}

// ---- The sealer: one process's chains ---------------------------------------

export class Sealer {
  readonly #key: SigningKey;
  /** This process's chains: one id for all its orgs (a chain is (org, writer)). */
  readonly writer: string = randomUUID();
  /** Per org: the last seal's seq and hash. */
  readonly #heads = new Map<string, { seq: number; hash: string }>();

  constructor(key: SigningKey) {
    this.#key = key;
  }

  get fingerprint(): string {
    return this.#key.fingerprint;
  }

  /** The chains' ends, to put back with `restore` when seals just made will not be kept. */
  snapshot(): ReadonlyMap<string, { seq: number; hash: string }> {
    return new Map(this.#heads);
  }

  /** Puts the chains' ends back to a snapshot: the seals made since are dropped, so the next links to the last kept. */
  restore(snapshot: ReadonlyMap<string, { seq: number; hash: string }>): void {
    this.#heads.clear();
    for (const [org, head] of snapshot) this.#heads.set(org, head);
  }

  /**
   * The seals of one batch's lines, one per org, as lines to append after them.
   * Lines of an earlier version (no entry hash) are left unsealed.
   */
  sealLines(lines: readonly string[], now: Date = new Date()): { lines: string[]; seals: Seal[] } {
    const columns = new SealColumns();
    for (const line of lines) columns.pushLine(line);
    return this.sealColumns(columns, now);
  }

  /** The seals of one batch's rows, given their seal columns: one per org (and batch id, should a recovered segment hold several). */
  sealColumns(columns: SealColumns, now: Date = new Date()): { lines: string[]; seals: Seal[] } {
    return run(this.sealSteps(columns, now));
  }

  /**
   * sealColumns in steps, for the batcher to run a slice per event-loop turn:
   * yields between orgs and every SEAL_SLICE_HASHES hashes of a tree. The
   * columns must not change until it is done; the chains advance as each seal
   * is made, so one batch's steps must end before the next batch's begin.
   */
  *sealSteps(columns: SealColumns, now: Date = new Date()): Generator<void, { lines: string[]; seals: Seal[] }> {
    const perOrg = new Map<string, Map<string, number[]>>();
    for (let i = 0; i < columns.count; i++) {
      const orgId = columns.orgAt(i);
      let batches = perOrg.get(orgId);
      if (batches === undefined) perOrg.set(orgId, (batches = new Map()));
      const batchId = columns.batchAt(i);
      let rows = batches.get(batchId);
      if (rows === undefined) batches.set(batchId, (rows = []));
      rows.push(i);
    }
    const seals: Seal[] = [];
    const createdAt = now.toISOString();
    for (const [orgId, batches] of perOrg) {
      for (const [batchId, rows] of batches) {
        yield;
        const order = columns.order(rows);
        const root = yield* columns.rootSteps(order);
        const head = this.#heads.get(orgId) ?? { seq: 0, hash: GENESIS_HASH };
        const unsigned = {
          id: randomUUID(),
          orgId,
          writer: this.writer,
          seq: head.seq + 1,
          batchId,
          firstAt: new Date(columns.msAt(order[0]!)).toISOString(),
          lastAt: new Date(columns.msAt(order[order.length - 1]!)).toISOString(),
          count: order.length,
          root,
          prevHash: head.hash,
          keyFingerprint: this.#key.fingerprint,
          createdAt,
        };
        const body = sealBody(unsigned);
        const seal: Seal = { ...unsigned, sealHash: hash('sha256', body, 'hex'), signature: sign(null, Buffer.from(body), this.#key.privateKey).toString('base64') };
        this.#heads.set(orgId, { seq: seal.seq, hash: seal.sealHash });
        seals.push(seal);
      }
    }
    return { lines: seals.map(encodeSealLine), seals };
  }
}

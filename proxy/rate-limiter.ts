// The rate limiter: one counter per (agent, limit) in use, deciding on the hot
// path from memory alone, and (in split mode) shared with the other proxies
// through the metadata store by a background sync.
//
// The algorithm is a sliding window counted in sub-windows: each limit's window
// W is cut into SLOTS slots of W/SLOTS, aligned on the Unix epoch (so every
// process numbers them alike), and a counter keeps how many calls it admitted
// in each of the last SLOTS + 1 slots. A call at time t is admitted when the
// calls counted in the slots that overlap (t - W, t] leave room for one more.
// The oldest of those slots lies partly before t - W and is counted whole, so
// the window is never under-counted: in any window of W at most N + burst calls
// pass (the contract's promise, exactly), from rest N + burst pass at once, and
// a refused call is refused at most W/SLOTS earlier than an exact log of every
// call would refuse it. A token bucket or GCRA cannot keep that promise: any
// refill during W admits more than N + burst in some window after a full
// burst. An exact log needs memory per call; this needs SLOTS + 1 counts per
// counter, kept in typed arrays (no object per counter).
//
// Split mode: each of the P live proxies may hold at most its part of the
// quota, floor((N + burst) / P) (the remainder to the lowest-ranked ones), in
// any window of its own calls; so all together never pass more than N + burst.
// Each proxy also adds its counts to the store every RATE_LIMIT_SYNC_MS and
// reads back everyone's, and a call passes only while all the counts it knows
// of leave room: what a proxy that stopped or left still holds in the window
// keeps counting. A proxy that starts admits no limited call for its first
// two syncs, so that the others know it is there (and it knows their counts)
// before it takes its part. Parts split the quota evenly, so an agent whose
// calls all reach one proxy of P gets 1/P of it there: docs/api.md "Rate
// limits" says so, and why (a split that follows the load needs a store round
// trip per grant, or admits more than the quota while views are stale).
import { countMatchingCalls, type CompiledLimit, type McpCall } from '../shared/policy/index.js';
import type { RateCountRow } from '../shared/stores/metadata-driver.js';

/** Sub-windows per window: a refusal comes at most W/SLOTS early. */
export const SLOTS = 16;
const RING = SLOTS + 1;
const INITIAL_CAPACITY = 1024;

/** Counts per (limit, agent, slot) as the store adds them up across proxies; slot = floor(epoch ms / slot length). */
type RateCount = RateCountRow;

/** What a limit's decision says: the refused limit, or the RateLimit field of an admitted call. */
export interface RateVerdict {
  /** Null when admitted. */
  refused: CompiledLimit | null;
  /** Whole seconds (≥ 1) until the refused call could pass. */
  retryAfter: number;
  /** `RateLimit-Policy` of the matched limits (all of them, or the refusing one). */
  policyHeader: string;
  /** `RateLimit` of the matched limits (all of them, or the refusing one). */
  stateHeader: string;
  /** Refused for good: an MCP batch of more requests the limit counts (`calls`) than it lets through at all (`most`: its quota, or this proxy's part of it). Null otherwise. */
  neverFits: { calls: number; most: number } | null;
}

/** A limit as the counters know it: its window, its quota, and the agents counted under it. */
interface LimitTable {
  readonly key: string;
  readonly quota: number;
  readonly windowMs: number;
  readonly slotMs: number;
  readonly byAgent: Map<string, number>;
}

export interface RateLimiterOptions {
  /** The most counters kept; when full after dropping idle ones, new counters are refused. */
  maxCounters: number;
  /** Epoch milliseconds (tests move it). */
  now?: () => number;
}

export class RateLimiter {
  readonly #tables = new Map<string, LimitTable>();
  readonly #maxCounters: number;
  readonly #now: () => number;

  // Counter i: its slots' counts at [i * RING, (i + 1) * RING), own and others'.
  #own = new Uint32Array(INITIAL_CAPACITY * RING);
  /** Other proxies' counts, allocated once a sync reports any. */
  #remote: Uint32Array | null = null;
  /** The newest slot the counter has been moved to. */
  #newest = new Float64Array(INITIAL_CAPACITY);
  #tableOf: (LimitTable | undefined)[] = [];
  #agentOf: (string | undefined)[] = [];
  #free: number[] = [];
  #used = 0;
  #size = 0;
  #sweptAt = Number.NEGATIVE_INFINITY;

  // Split mode: the calls admitted since the last sync (counter, slot), the live
  // proxies and this one's rank among them.
  #syncing = false;
  /** Calls admitted and not yet added to the store: counter → slot → count (bounded by counters × slots). */
  #pending = new Map<number, Map<number, number>>();
  #nodes = 1;
  #rank = 0;
  #syncMs = 0;
  /** Before this (epoch ms) a syncing proxy admits no limited call (startSyncing). */
  #activeAt = 0;
  /** From this (epoch ms) on, a proxy whose syncs never succeeded counts alone (startSyncing). */
  #aloneAt = 0;
  #syncsDone = 0;

  /** Scratch for one decision (decisions are synchronous). */
  readonly #matched: CompiledLimit[] = [];
  /** How many calls each matched limit counts (an MCP batch: its matching requests). */
  readonly #weights: number[] = [];
  readonly #counters: number[] = [];

  constructor(options: RateLimiterOptions) {
    this.#maxCounters = options.maxCounters;
    this.#now = options.now ?? Date.now;
  }

  /** Counters in use. */
  get size(): number {
    return this.#size;
  }

  /**
   * Decides a call the rules allowed against the policy's `limits`: null when
   * none matches (nothing is counted); else admitted (every matching limit had
   * room, and each now counts the call) or refused (none counts it), with the
   * RateLimit fields to send.
   */
  decide(agentId: string, limits: readonly CompiledLimit[], tool: string, action: string, path: string, mcp: readonly (McpCall | null)[] | null = null): RateVerdict | null {
    const matched = this.#matched;
    const weights = this.#weights;
    const counters = this.#counters;
    matched.length = 0;
    weights.length = 0;
    counters.length = 0;
    for (let i = 0; i < limits.length; i++) {
      const weight = countMatchingCalls(limits[i]!, tool, action, path, mcp);
      if (weight > 0) {
        matched.push(limits[i]!);
        weights.push(weight);
      }
    }
    if (matched.length === 0) return null;

    const now = this.#now();
    let refused: CompiledLimit | null = null;
    let refusedAt = 0;
    let refusedCounter = -1;
    let neverFits: { calls: number; most: number } | null = null;
    for (let i = 0; i < matched.length; i++) {
      const limit = matched[i]!;
      const weight = weights[i]!;
      const table = this.#table(limit.key, limit.quota, limit.windowMs);
      const counter = this.#counter(table, agentId);
      counters.push(counter);
      if (counter < 0) {
        // The table is full of live counters: refuse rather than count nothing.
        if (refused === null || now + table.windowMs > refusedAt) {
          refused = limit;
          refusedAt = now + table.windowMs;
          refusedCounter = -1;
        }
        continue;
      }
      this.#advance(counter, Math.floor(now / table.slotMs));
      // The counter's newest slot, if the clock went back: a call counted in an
      // older slot would leave the window early (past the ring, into a newer slot's cell).
      const slot = this.#newest[counter]!;
      const counted = this.#counted(counter);
      let freeAt = -1;
      // A batch of more matching requests than the quota never fits: refused, the agent must split it.
      let most = -1;
      if (weight > table.quota) most = table.quota;
      else if (counted + weight > table.quota) freeAt = this.#roomAt(counter, table, slot, counted, weight);
      else if (this.#syncing && !this.#active(now)) freeAt = Math.max(this.#activeAt, now + this.#syncMs);
      else if (this.#nodes > 1) {
        const part = this.#partOf(table.quota);
        const own = this.#ownCounted(counter);
        if (part > 0 && weight > part) most = part;
        // Part 0 (more proxies than the quota): no call fits here for now.
        else if (own + weight > part) freeAt = part === 0 ? now + table.windowMs : this.#ownRoomAt(counter, table, slot, own, part, weight);
      }
      if (most >= 0) {
        if (neverFits === null) {
          neverFits = { calls: weight, most };
          refused = limit;
          refusedAt = now + table.windowMs;
          refusedCounter = counter;
        }
        continue;
      }
      if (neverFits === null && freeAt >= 0 && (refused === null || freeAt > refusedAt)) {
        refused = limit;
        refusedAt = freeAt;
        refusedCounter = counter;
      }
    }

    if (refused !== null) {
      const retryAfter = Math.max(1, Math.ceil((refusedAt - now) / 1000));
      const remaining = refusedCounter < 0 ? 0 : this.#remaining(refusedCounter, refused.quota, now);
      return {
        refused,
        retryAfter,
        policyHeader: refused.policyHeader,
        stateHeader: `${refused.headerName};r=${remaining};t=${retryAfter}`,
        neverFits,
      };
    }

    let policyHeader = '';
    let stateHeader = '';
    for (let i = 0; i < matched.length; i++) {
      const limit = matched[i]!;
      const counter = counters[i]!;
      const table = this.#tableOf[counter]!;
      const slot = this.#newest[counter]!; // as above: decide advanced it to now's slot at least
      const at = counter * RING + (slot % RING);
      this.#own[at] = this.#own[at]! + weights[i]!;
      if (this.#syncing) this.#addPending(counter, slot, weights[i]!);
      const remaining = this.#remaining(counter, limit.quota, now);
      // Until every call counted now has left the window: the whole quota is back.
      const reset = Math.max(1, Math.ceil(((slot + RING) * table.slotMs - now) / 1000));
      const sep = i === 0 ? '' : ', ';
      policyHeader += sep + limit.policyHeader;
      stateHeader += `${sep}${limit.headerName};r=${remaining};t=${reset}`;
    }
    return { refused: null, retryAfter: 0, policyHeader, stateHeader, neverFits: null };
  }

  /** What the last decide counted, when it admitted the call: counter, slot, slot length, calls, ... for `refund`. */
  lastCharge(): number[] {
    const charge: number[] = [];
    for (let i = 0; i < this.#counters.length; i++) {
      const counter = this.#counters[i]!;
      const slotMs = this.#tableOf[counter]!.slotMs;
      charge.push(counter, this.#newest[counter]!, slotMs, this.#weights[i]!); // the slot decide counted in
    }
    return charge;
  }

  /**
   * Takes back a call counted by decide that did not go upstream after all (an
   * approved retry that lost its approval's race, or found it expired): only
   * the calls that reach the upstream count against a limit. A count the sync
   * has already shared with other proxies stays with them until it leaves the
   * window.
   */
  refund(charge: readonly number[]): void {
    for (let i = 0; i < charge.length; i += 4) {
      const counter = charge[i]!;
      const slot = charge[i + 1]!;
      const calls = charge[i + 3]!;
      if (this.#tableOf[counter]?.slotMs !== charge[i + 2] || this.#newest[counter]! - slot >= RING) continue; // reused, or past its ring
      const at = counter * RING + (slot % RING);
      this.#own[at] = Math.max(0, this.#own[at]! - calls);
      const pending = this.#pending.get(counter);
      const count = pending?.get(slot) ?? 0;
      if (count > calls) pending!.set(slot, count - calls);
      else if (count > 0) pending!.delete(slot);
    }
  }

  /** Drops counters whose every slot has left the window (their count is 0). */
  sweep(): number {
    const now = this.#now();
    let dropped = 0;
    for (let counter = 0; counter < this.#used; counter++) {
      const table = this.#tableOf[counter];
      if (table === undefined) continue;
      if (this.#newest[counter]! + SLOTS < Math.floor(now / table.slotMs)) {
        this.#release(counter);
        dropped++;
      }
    }
    for (const [key, table] of this.#tables) if (table.byAgent.size === 0) this.#tables.delete(key);
    return dropped;
  }

  /** Calls left before a refusal: the window's room, and in split mode this proxy's part too. */
  #remaining(counter: number, quota: number, now: number): number {
    let left = quota - this.#counted(counter);
    if (this.#syncing && !this.#active(now)) return 0;
    if (this.#nodes > 1) left = Math.min(left, this.#partOf(quota) - this.#ownCounted(counter));
    return Math.max(0, left);
  }

  /**
   * A syncing proxy admits limited calls once two syncs succeeded and two sync
   * intervals passed (the others have seen its heartbeat); or, when the store
   * did not answer twice, after a grace period: alone when it never answered,
   * by the share its one answer gave otherwise (a store that went down after
   * the first sync left every limited call refused while it stayed down).
   */
  #active(now: number): boolean {
    return (this.#syncsDone >= 2 && now >= this.#activeAt) || (this.#syncsDone < 2 && now >= this.#aloneAt);
  }

  #addPending(counter: number, slot: number, count: number): void {
    let bySlot = this.#pending.get(counter);
    if (bySlot === undefined) this.#pending.set(counter, (bySlot = new Map()));
    bySlot.set(slot, (bySlot.get(slot) ?? 0) + count);
  }

  // --- split mode -------------------------------------------------------------

  /**
   * Turns on the admission log the sync reads (`syncMs` apart). For the first
   * two syncs the proxy admits no limited call: the others learn that it is
   * live at their next sync (until then each holds a larger part), and it
   * learns their counts.
   */
  startSyncing(syncMs: number, graceMs: number): void {
    this.#syncing = true;
    this.#syncMs = syncMs;
    this.#activeAt = this.#now() + 2 * syncMs;
    this.#aloneAt = this.#now() + graceMs;
    this.#remote ??= new Uint32Array(this.#own.length);
  }

  /**
   * The calls admitted since the last call of takeAdmitted, summed per counter
   * and slot, as the store adds them. A failed sync gives them back with
   * `returnAdmitted`.
   */
  takeAdmitted(): RateCount[] {
    const pending = this.#pending;
    this.#pending = new Map();
    const counts: RateCount[] = [];
    for (const [counter, bySlot] of pending) {
      const table = this.#tableOf[counter];
      const agentId = this.#agentOf[counter];
      if (table === undefined || agentId === undefined) continue;
      for (const [slot, count] of bySlot) {
        // Whole milliseconds: a slot of a per-second limit is 62.5 ms long.
        counts.push({ limit_key: table.key, agent_id: agentId, slot, count, expires_at: Math.ceil((slot + RING) * table.slotMs) });
      }
    }
    return counts;
  }

  /** Counts a failed sync could not add: they are sent again next time (those still in a window). */
  returnAdmitted(counts: readonly RateCount[]): void {
    const now = this.#now();
    for (const c of counts) {
      if (c.expires_at <= now) continue;
      const counter = this.#tables.get(c.limit_key)?.byAgent.get(c.agent_id);
      if (counter !== undefined) this.#addPending(counter, c.slot, c.count);
    }
  }

  /**
   * A sync's answer: the live proxies (sorted ids) and the store's totals of
   * counters that changed. Own counts not yet in those totals (admitted since
   * takeAdmitted, for a store answered asynchronously) are told apart.
   */
  applySync(nodes: readonly string[], self: string, totals: readonly RateCount[]): void {
    this.#nodes = Math.max(1, nodes.length);
    this.#rank = Math.max(0, nodes.indexOf(self));
    this.#syncsDone++;
    const remote = this.#remote!;
    const unsent = this.#pending;
    const now = this.#now();
    for (const total of totals) {
      const table = this.#tableFromKey(total.limit_key);
      if (table === null) continue;
      const counter = this.#counter(table, total.agent_id);
      if (counter < 0) continue;
      const current = Math.floor(now / table.slotMs);
      if (total.slot > current || total.slot < current - SLOTS) continue;
      this.#advance(counter, current);
      if (this.#newest[counter]! < total.slot) continue;
      const at = counter * RING + (total.slot % RING);
      const pushed = this.#own[at]! - (unsent.get(counter)?.get(total.slot) ?? 0);
      remote[at] = Math.max(0, total.count - pushed);
    }
  }

  // --- counters -------------------------------------------------------------

  #table(key: string, quota: number, windowMs: number): LimitTable {
    let table = this.#tables.get(key);
    if (table === undefined) {
      table = { key, quota, windowMs, slotMs: windowMs / SLOTS, byAgent: new Map() };
      this.#tables.set(key, table);
    }
    return table;
  }

  /** A key other proxies wrote: `<name>\0<N>/<windowMs>+<burst>` (CompiledLimit.key). */
  #tableFromKey(key: string): LimitTable | null {
    const known = this.#tables.get(key);
    if (known !== undefined) return known;
    const match = /\u0000(\d+)\/(\d+)\+(\d+)$/.exec(key);
    if (match === null) return null;
    return this.#table(key, Number(match[1]) + Number(match[3]), Number(match[2]));
  }

  /** The agent's counter under the table, created on first use; -1 when the table is full. */
  #counter(table: LimitTable, agentId: string): number {
    const known = table.byAgent.get(agentId);
    if (known !== undefined) return known;
    if (this.#size >= this.#maxCounters) {
      // Sweeping walks every counter: at most once a second while the table is full.
      const now = this.#now();
      if (now - this.#sweptAt >= 1000) {
        this.#sweptAt = now;
        this.sweep();
      }
      if (this.#size >= this.#maxCounters) return -1;
      // The sweep drops empty tables, and this one may have had no counter yet.
      if (!this.#tables.has(table.key)) this.#tables.set(table.key, table);
    }
    const counter = this.#free.pop() ?? this.#grow();
    this.#own.fill(0, counter * RING, (counter + 1) * RING);
    this.#remote?.fill(0, counter * RING, (counter + 1) * RING);
    this.#newest[counter] = Math.floor(this.#now() / table.slotMs);
    this.#tableOf[counter] = table;
    this.#agentOf[counter] = agentId;
    table.byAgent.set(agentId, counter);
    this.#size++;
    return counter;
  }

  #grow(): number {
    const counter = this.#used++;
    const capacity = this.#newest.length;
    if (counter >= capacity) {
      const next = capacity * 2;
      const own = new Uint32Array(next * RING);
      own.set(this.#own);
      this.#own = own;
      if (this.#remote !== null) {
        const remote = new Uint32Array(next * RING);
        remote.set(this.#remote);
        this.#remote = remote;
      }
      const newest = new Float64Array(next);
      newest.set(this.#newest);
      this.#newest = newest;
    }
    return counter;
  }

  #release(counter: number): void {
    const table = this.#tableOf[counter]!;
    table.byAgent.delete(this.#agentOf[counter]!);
    this.#tableOf[counter] = undefined;
    this.#agentOf[counter] = undefined;
    // Its calls have all left the window: nothing of them is owed to the store.
    this.#pending.delete(counter);
    this.#free.push(counter);
    this.#size--;
  }

  /** Moves the counter to `slot`, clearing the slots that left the window. */
  #advance(counter: number, slot: number): void {
    const newest = this.#newest[counter]!;
    if (slot <= newest) return;
    const base = counter * RING;
    const steps = Math.min(slot - newest, RING);
    for (let s = 1; s <= steps; s++) {
      const at = base + ((newest + s) % RING);
      this.#own[at] = 0;
      if (this.#remote !== null) this.#remote[at] = 0;
    }
    this.#newest[counter] = slot;
  }

  /** Calls counted in the window (own and others'). */
  #counted(counter: number): number {
    let sum = this.#ownCounted(counter);
    const remote = this.#remote;
    if (remote !== null) {
      const base = counter * RING;
      for (let i = 0; i < RING; i++) sum += remote[base + i]!;
    }
    return sum;
  }

  #ownCounted(counter: number): number {
    const own = this.#own;
    const base = counter * RING;
    let sum = 0;
    for (let i = 0; i < RING; i++) sum += own[base + i]!;
    return sum;
  }

  /** When, dropping the oldest slots, one more call fits: the epoch ms the last needed slot leaves. */
  #roomAt(counter: number, table: LimitTable, slot: number, counted: number, calls: number): number {
    const base = counter * RING;
    let left = counted;
    for (let oldest = slot - SLOTS; oldest <= slot; oldest++) {
      const at = base + (oldest % RING);
      left -= this.#own[at]! + (this.#remote?.[at] ?? 0);
      // A call in slot `oldest` stops counting once slot oldest + RING begins.
      if (left + calls <= table.quota) return (oldest + RING) * table.slotMs;
    }
    return (slot + RING) * table.slotMs;
  }

  /** This proxy's part of `quota` while P proxies are live: an even split, the remainder to the lowest ranks. */
  #partOf(quota: number): number {
    return Math.floor(quota / this.#nodes) + (this.#rank < quota % this.#nodes ? 1 : 0);
  }

  /** As #roomAt, for this proxy's own calls against its part. */
  #ownRoomAt(counter: number, table: LimitTable, slot: number, own: number, part: number, calls: number): number {
    const base = counter * RING;
    let left = own;
    for (let oldest = slot - SLOTS; oldest <= slot; oldest++) {
      left -= this.#own[base + (oldest % RING)]!;
      if (left + calls <= part) return (oldest + RING) * table.slotMs;
    }
    return (slot + RING) * table.slotMs;
  }

}

// Steady proxied load for lifecycle tests: `clients` loops each sending one call
// after another with its own X-Request-Id, counting what was answered. A call
// whose connection failed was not answered: a graceful stop must not have
// audited it; a kill may have (its record was on disk, its answer in flight).
import type { Test } from 'tap';
import { api, type Session } from './service.js';

export interface Load {
  /** X-Request-Id of every call that got a response (any status). */
  answered: string[];
  /** X-Request-Id of every call sent whose answer never came whole (the connection failed). */
  unanswered: string[];
  /** How many of them were 503 (refused while shutting down). */
  refused: () => number;
  /** Stops the loops and waits for them. */
  stop(): Promise<void>;
}

export function startLoad(url: string, clients = 32): Load {
  const answered: string[] = [];
  const unanswered: string[] = [];
  let refused = 0;
  let running = true;
  let next = 0;
  const loop = async () => {
    while (running) {
      const id = `load-${process.pid}-${++next}`;
      try {
        const res = await fetch(url, { headers: { 'x-request-id': id } });
        await res.arrayBuffer();
        answered.push(id);
        if (res.status === 503) refused++;
      } catch {
        unanswered.push(id);
        await new Promise((r) => setTimeout(r, 5)); // the listener is gone: not answered, not audited
      }
    }
  };
  const loops = Array.from({ length: clients }, loop);
  return {
    answered,
    unanswered,
    refused: () => refused,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

/** Every audit entry's request_id for the agent, paging through GET /audit. */
export async function auditRequestIds(base: string, session: Session, agentId: string): Promise<string[]> {
  const ids: string[] = [];
  for (let offset = 0; ; offset += 1000) {
    const page = (await api(base, session, 'GET', `/audit?agent_id=${agentId}&limit=1000&offset=${offset}`)).json as { request_id: string }[];
    ids.push(...page.map((entry) => entry.request_id));
    if (page.length < 1000) return ids;
  }
}

/** Every answered call is in the audit exactly once, and nothing else is: `recorded` are the rows' request ids. */
export function assertAuditedOnce(t: Test, recorded: readonly string[], answered: readonly string[]): void {
  t.equal(recorded.length, answered.length, `audit rows (${recorded.length}) equal calls answered (${answered.length})`);
  t.equal(new Set(recorded).size, recorded.length, 'no call recorded twice');
  t.strictSame([...recorded].sort(), [...answered].sort(), 'the rows are the answered calls');
}

/**
 * After a kill -9: every answered call is in the audit exactly once, and the
 * only other rows are calls that were in flight at the kill. A record reaches
 * the journal before its answer leaves, so an answer still in the dying
 * socket's buffer is a call the upstream served and the audit rightly holds,
 * though its client never saw it: at most one per client connection.
 */
export function assertAuditedOnceAfterKill(t: Test, recorded: readonly string[], load: Pick<Load, 'answered' | 'unanswered'>, clients: number): void {
  t.equal(new Set(recorded).size, recorded.length, 'no call recorded twice');
  const rows = new Set(recorded);
  const lost = load.answered.filter((id) => !rows.has(id));
  t.strictSame(lost, [], `every answered call (${load.answered.length}) has its row`);
  const answered = new Set(load.answered);
  const inFlight = new Set(load.unanswered);
  const extra = recorded.filter((id) => !answered.has(id));
  t.strictSame(extra.filter((id) => !inFlight.has(id)), [], 'every other row is a call in flight at the kill');
  t.ok(extra.length <= clients, `${extra.length} rows of calls in flight at the kill (at most one per client, ${clients})`);
}

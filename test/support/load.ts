// Steady proxied load for lifecycle tests: `clients` loops each sending one call
// after another with its own X-Request-Id, counting what was answered. A call
// whose connection failed was not answered (and must not be audited).
import type { Test } from 'tap';
import { api, type Session } from './service.js';

export interface Load {
  /** X-Request-Id of every call that got a response (any status). */
  answered: string[];
  /** How many of them were 503 (refused while shutting down). */
  refused: () => number;
  /** Stops the loops and waits for them. */
  stop(): Promise<void>;
}

export function startLoad(url: string, clients = 32): Load {
  const answered: string[] = [];
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
        await new Promise((r) => setTimeout(r, 5)); // the listener is gone: not answered, not audited
      }
    }
  };
  const loops = Array.from({ length: clients }, loop);
  return {
    answered,
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

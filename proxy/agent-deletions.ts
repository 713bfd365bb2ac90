// Deleting an agent ends its calls in flight (docs/api.md, DELETE /agents): an
// MCP session's event stream, a download still streaming, an upload still
// arriving, a call waiting for its upstream. Without it a deleted agent's open
// stream went on for hours with its organization's credential. Held calls are
// hold.ts's (it answers them 401 the same way, and ends one its approval
// released while it read the agent). The change reaches this process
// at once, or through the change log within CHANGE_POLL_MS (split mode).
import { FIELD, type Logger } from '../shared/log.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import type { InFlight } from './in-flight.js';

/** Ends the calls of each agent the store reports deleted; returns the unsubscribe. */
export function endCallsOfDeletedAgents(deps: { store: MetadataStore; running: InFlight; log: Logger }): () => void {
  const { store, running, log } = deps;

  function endCalls(agentId: string): void {
    for (const ex of running.list()) {
      if (ex.agent?.id !== agentId) continue;
      try {
        ex.endForAgentDeleted();
      } catch (err) {
        // One call's failure must neither spare the agent's other calls nor take the process down (this runs from a timer).
        log.error('a deleted agent\'s call could not be ended', { [FIELD.agentId]: agentId, [FIELD.requestId]: ex.requestId || ex.id, [FIELD.err]: err });
      }
    }
  }

  /** The feed lost its place, so a deletion may have been missed: each agent with calls in flight is read again. */
  async function recheck(): Promise<void> {
    const agents = new Map<string, string>();
    for (const ex of running.list()) if (ex.agent !== null) agents.set(ex.agent.id, ex.agent.orgId);
    for (const [agentId, orgId] of agents) {
      try {
        if ((await store.getAgent(orgId, agentId)) === undefined) endCalls(agentId);
      } catch (err) {
        log.warn('an agent with calls in flight could not be read again; its calls go on', { [FIELD.agentId]: agentId, [FIELD.err]: err });
      }
    }
  }

  return store.changes.subscribe({
    apply(change) {
      // Next turn: a change can be reported inside the deleting request's own
      // handler (all-in-one), where another response must not be written.
      if (change.kind === 'agent') setImmediate(endCalls, change.agentId);
    },
    clear() {
      void recheck();
    },
  });
}

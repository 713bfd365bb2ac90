// The lifecycle of a running process: how it stops (stop accepting, drain the
// calls in flight up to a deadline, flush or spool the audit, close what it
// opened, in that order), and what a signal does. docs/lifecycle.md tells it.

export interface StopSteps {
  /** Stop taking calls: new connections refused, calls on kept-alive ones answered 503. */
  beginRefusing(): void;
  /** Calls still in flight (the drain waits for 0 up to its deadline). */
  inFlight(): number;
  /** Past the deadline: ends the calls still in flight (a stream as a complete response), each audited. */
  endInFlight(): void;
  /**
   * After the drain: requests that still arrive on kept-alive connections get
   * no answer (the connection is closed), so no call is answered after the
   * audit flush began and none can miss it.
   */
  stopAnswering(): void;
  /** Writes or spools every audit record (after the drain, so that none comes later). */
  flushAudit(): Promise<void>;
  /** Closed in order after the flush; each may be absent in a role. */
  close: ReadonlyArray<() => Promise<void> | undefined>;
}

const DRAIN_POLL_MS = 20;

/** Stops accepting, drains in-flight calls up to `drainMs`, flushes (or spools) the audit, closes the rest. Idempotent. */
export function stopInOrder(steps: StopSteps): (drainMs?: number) => Promise<void> {
  let stopped: Promise<void> | null = null;
  return (drainMs = 10_000) => {
    stopped ??= (async () => {
      steps.beginRefusing();
      const deadline = Date.now() + drainMs;
      while (steps.inFlight() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, DRAIN_POLL_MS));
      if (steps.inFlight() > 0) {
        steps.endInFlight();
        // The ends are written on the event loop's next turns; they are over in well under a second.
        const ended = Date.now() + 1000;
        while (steps.inFlight() > 0 && Date.now() < ended) await new Promise((r) => setTimeout(r, DRAIN_POLL_MS));
      }
      steps.stopAnswering();
      await steps.flushAudit();
      for (const close of steps.close) await close();
    })();
    return stopped;
  };
}

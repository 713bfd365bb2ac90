// Overview of the last 24 h per agent: calls, deny rate, p95 latency, counted by
// the audit store over the whole window (GET /audit/summary). It was computed
// here from five pages of 1,000 entries, outputs and all: the newest 5,000 calls
// only, and up to seconds of the service's event loop for orgs that log outputs.
import { useEffect, useState } from 'preact/hooks';
import { call } from '../api.js';
import type { AuditSummary } from '../types.js';
import { ErrorLine, useAction } from '../ui.js';

export function OverviewPage() {
  const [summary, setSummary] = useState<AuditSummary | null>(null);
  const [error, run] = useAction();
  useEffect(() => {
    void run(async () => {
      setSummary((await call<AuditSummary>('GET', '/audit/summary')).data);
    });
  }, []);
  const calls = summary?.calls ?? 0;
  const denied = summary?.denied ?? 0;
  const agents = summary?.agents ?? [];
  return (
    <section aria-labelledby="ov-h">
      <h1 id="ov-h">Overview, last 24 h</h1>
      <ErrorLine message={error} />
      <div class="tiles">
        <div class="card tile"><span class="big">{calls}</span> calls</div>
        <div class="card tile"><span class="big">{calls === 0 ? '0' : ((100 * denied) / calls).toFixed(1)}%</span> denied</div>
        <div class="card tile"><span class="big">{summary?.agents_total ?? 0}</span> active agents</div>
      </div>
      {agents.length < (summary?.agents_total ?? 0) && <p class="muted">The {agents.length} agents with the most calls of {summary!.agents_total}.</p>}
      <div class="scroll">
        <table>
          <thead><tr><th scope="col">Agent</th><th scope="col">Calls</th><th scope="col">Deny rate</th><th scope="col">p95 latency</th></tr></thead>
          <tbody>
            {agents.map((a) => (
              <tr>
                <td>{a.agent_name}</td>
                <td>{a.calls}</td>
                <td>{((100 * a.denied) / a.calls).toFixed(1)}%</td>
                <td>{a.p95_latency_ms} ms</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {summary !== null && agents.length === 0 && <p class="muted">No calls in the last 24 hours. <a href="#/agents">Create an agent</a> and send a call through its proxy URL.</p>}
    </section>
  );
}

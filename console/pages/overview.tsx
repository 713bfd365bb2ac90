// Overview of the last 24 h per agent: calls, deny rate, p95 latency. Computed
// from GET /audit (up to 5,000 entries, five pages of 1,000); beyond that the
// page says the figures cover the newest 5,000.
import { useEffect, useState } from 'preact/hooks';
import { call } from '../api.js';
import { summarize, type Row } from '../summary.js';
import type { AuditEntry } from '../types.js';
import { ErrorLine, useAction } from '../ui.js';

const PAGE = 1000;
const MAX_PAGES = 5;

export function OverviewPage() {
  const [rows, setRows] = useState<Row[]>([]);
  const [total, setTotal] = useState({ seen: 0, all: 0 });
  const [error, run] = useAction();
  useEffect(() => {
    void run(async () => {
      // A fixed window: entries written while the pages are read would push older
      // ones down a page and repeat them (summarize also counts each id once).
      const until = new Date().toISOString();
      const since = new Date(Date.parse(until) - 86_400_000).toISOString();
      const entries: AuditEntry[] = [];
      let all = 0;
      for (let page = 0; page < MAX_PAGES; page++) {
        const answer = await call<AuditEntry[]>('GET', `/audit?since=${encodeURIComponent(since)}&until=${encodeURIComponent(until)}&limit=${PAGE}&offset=${page * PAGE}`);
        entries.push(...answer.data);
        all = Number(answer.headers.get('x-total-count') ?? entries.length);
        if (entries.length >= all || answer.data.length < PAGE) break;
      }
      setRows(summarize(entries));
      setTotal({ seen: entries.length, all });
    });
  }, []);
  const calls = rows.reduce((n, r) => n + r.calls, 0);
  const denied = rows.reduce((n, r) => n + r.denied, 0);
  return (
    <section aria-labelledby="ov-h">
      <h1 id="ov-h">Overview, last 24 h</h1>
      <ErrorLine message={error} />
      <div class="tiles">
        <div class="card tile"><span class="big">{total.all}</span> calls</div>
        <div class="card tile"><span class="big">{calls === 0 ? '0' : ((100 * denied) / calls).toFixed(1)}%</span> denied</div>
        <div class="card tile"><span class="big">{rows.length}</span> active agents</div>
      </div>
      {total.seen < total.all && <p class="muted">Figures per agent cover the newest {total.seen} of {total.all} calls.</p>}
      <div class="scroll">
        <table>
          <thead><tr><th scope="col">Agent</th><th scope="col">Calls</th><th scope="col">Deny rate</th><th scope="col">p95 latency</th></tr></thead>
          <tbody>
            {rows.map((r) => (
              <tr>
                <td>{r.agent}</td>
                <td>{r.calls}</td>
                <td>{((100 * r.denied) / r.calls).toFixed(1)}%</td>
                <td>{r.p95} ms</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {rows.length === 0 && <p class="muted">No calls in the last 24 hours. <a href="#/agents">Create an agent</a> and send a call through its proxy URL.</p>}
    </section>
  );
}

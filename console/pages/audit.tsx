// Audit: the filters of GET /audit, paging, an entry's detail, the PDF export,
// and a live tail (GET /audit/stream with the same filters).
import { useEffect, useRef, useState } from 'preact/hooks';
import { answered, authHeaders, call, get, problem } from '../api.js';
import { followAudit } from '../live-tail.js';
import type { Agent, AuditEntry } from '../types.js';
import { ErrorLine, Time, useAction } from '../ui.js';

const PAGE = 50;
const EMPTY = { agent_id: '', decision: '', tool_name: '', task_id: '', since: '', until: '' };
type Filters = typeof EMPTY;

function queryOf(filters: Filters): URLSearchParams {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(filters)) if (v !== '') q.set(k, k === 'since' || k === 'until' ? new Date(v).toISOString() : v);
  return q;
}

export function AuditPage() {
  const [agents, setAgents] = useState<Agent[]>([]);
  const [draft, setDraft] = useState<Filters>(EMPTY);
  const [filters, setFilters] = useState<Filters>(EMPTY);
  const [offset, setOffset] = useState(0);
  const [rows, setRows] = useState<AuditEntry[]>([]);
  const [total, setTotal] = useState(0);
  const [selected, setSelected] = useState<AuditEntry | null>(null);
  const [live, setLive] = useState<AuditEntry[]>([]);
  const [tail, setTail] = useState<string | null>(null);
  const stopTail = useRef<(() => void) | null>(null);
  const [error, run] = useAction();

  useEffect(() => void get<Agent[]>('/agents').then(setAgents, () => {}), []);
  useEffect(() => {
    void run(async () => {
      const q = queryOf(filters);
      q.set('limit', String(PAGE));
      q.set('offset', String(offset));
      const answer = await call<AuditEntry[]>('GET', `/audit?${q}`);
      setRows(answer.data);
      setTotal(Number(answer.headers.get('x-total-count') ?? answer.data.length));
    });
  }, [filters, offset]);
  useEffect(() => () => stopTail.current?.(), []);

  const toggleTail = () => {
    if (stopTail.current !== null) {
      stopTail.current();
      stopTail.current = null;
      setTail(null);
      return;
    }
    setLive([]);
    const q = queryOf(filters).toString();
    stopTail.current = followAudit(q ? `?${q}` : '', (entry) => setLive((prev) => [entry, ...prev].slice(0, 200)), setTail);
  };

  const [pdfDays, setPdfDays] = useState('7');
  const [pdfError, setPdfError] = useState<string | null>(null);
  const exportPdf = async () => {
    setPdfError(null);
    try {
      const res = await fetch(`/audit/export/pdf?days=${encodeURIComponent(pdfDays)}`, { headers: authHeaders() });
      if (!res.ok) {
        answered(res.status); // a refused token: back to the login page
        throw new Error(((await res.json().catch(() => ({}))) as { message?: string }).message ?? `HTTP ${res.status}`);
      }
      const name = /filename="([^"]+)"/.exec(res.headers.get('content-disposition') ?? '')?.[1] ?? 'audit.pdf';
      const url = URL.createObjectURL(await res.blob());
      const a = document.createElement('a');
      a.href = url;
      a.download = name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (err) {
      setPdfError(problem(err));
    }
  };

  const set = (field: keyof Filters) => (e: Event) => setDraft({ ...draft, [field]: (e.currentTarget as HTMLInputElement).value });
  return (
    <section aria-labelledby="audit-h">
      <h1 id="audit-h">Audit</h1>
      <form class="card row" aria-label="Filters" onSubmit={(e) => {
        e.preventDefault();
        setOffset(0);
        setFilters(draft);
      }}>
        <label>
          Agent
          <select name="agent_id" value={draft.agent_id} onChange={set('agent_id')}>
            <option value="">all</option>
            {agents.map((a) => <option value={a.id}>{a.name}</option>)}
          </select>
        </label>
        <label>
          Decision
          <select name="decision" value={draft.decision} onChange={set('decision')}>
            <option value="">all</option>
            <option value="allowed">allowed</option>
            <option value="denied">denied</option>
          </select>
        </label>
        <label>Tool<input name="tool_name" value={draft.tool_name} onInput={set('tool_name')} /></label>
        <label>Task id<input name="task_id" value={draft.task_id} onInput={set('task_id')} /></label>
        <label>Since<input name="since" type="datetime-local" value={draft.since} onInput={set('since')} /></label>
        <label>Until<input name="until" type="datetime-local" value={draft.until} onInput={set('until')} /></label>
        <button type="submit" class="primary">Apply</button>
      </form>
      <div class="card row">
        <button type="button" aria-pressed={tail !== null} onClick={toggleTail}>{tail === null ? 'Start live tail' : 'Stop live tail'}</button>
        <span role="status" class="muted">{tail === null ? '' : tail === 'open' ? 'Live: new entries appear below as they are written.' : tail}</span>
        <span class="spacer" />
        <label>PDF days<input name="pdf-days" type="number" min={1} max={365} value={pdfDays} onInput={(e) => setPdfDays(e.currentTarget.value)} /></label>
        <button type="button" onClick={() => void exportPdf()}>Export PDF</button>
      </div>
      <ErrorLine message={pdfError} />
      {tail !== null && (
        <div class="card" aria-labelledby="live-h">
          <h2 id="live-h">Live tail</h2>
          <EntryTable rows={live} onSelect={setSelected} label="live-tail" />
          {live.length === 0 && <p class="muted">Waiting for new entries…</p>}
        </div>
      )}
      <ErrorLine message={error} />
      <EntryTable rows={rows} onSelect={setSelected} label="audit-entries" />
      <nav class="pager" aria-label="Pages">
        <button type="button" disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PAGE))}>Newer</button>
        <span>{total === 0 ? 'No entries' : `${offset + 1}–${Math.min(offset + PAGE, total)} of ${total}`}</span>
        <button type="button" disabled={offset + PAGE >= total} onClick={() => setOffset(offset + PAGE)}>Older</button>
      </nav>
      {selected && <EntryDetail entry={selected} onClose={() => setSelected(null)} />}
    </section>
  );
}

function EntryTable({ rows, onSelect, label }: { rows: AuditEntry[]; onSelect: (e: AuditEntry) => void; label: string }) {
  return (
    <div class="scroll">
      <table data-testid={label}>
        <thead><tr><th scope="col">When</th><th scope="col">Agent</th><th scope="col">Call</th><th scope="col">Decision</th><th scope="col">Status</th><th scope="col">Latency</th><th scope="col">Reasoning</th></tr></thead>
        <tbody>
          {rows.map((e) => (
            <tr key={e.id}>
              <td><button type="button" class="link" onClick={() => onSelect(e)} aria-label={`Details of the entry at ${e.timestamp}`}><Time iso={e.timestamp} /></button></td>
              <td>{e.agent_name}</td>
              <td><code>{e.action} {e.tool_name}</code></td>
              <td><span class={`badge ${e.decision}`}>{e.decision}</span></td>
              <td>{e.status_code}</td>
              <td>{e.latency_ms} ms</td>
              <td class="clip">{e.reasoning}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function EntryDetail({ entry, onClose }: { entry: AuditEntry; onClose: () => void }) {
  const close = useRef<HTMLButtonElement>(null);
  useEffect(() => close.current?.focus(), [entry.id]);
  return (
    <aside class="card detail" role="dialog" aria-modal="false" aria-labelledby="detail-h" onKeyDown={(e) => e.key === 'Escape' && onClose()}>
      <h2 id="detail-h">Entry {entry.id}</h2>
      <button type="button" ref={close} onClick={onClose}>Close</button>
      <dl>
        {Object.entries(entry).map(([key, value]) => (
          <>
            <dt>{key}</dt>
            <dd><pre>{value === null ? 'null' : typeof value === 'string' ? value : JSON.stringify(value)}</pre></dd>
          </>
        ))}
      </dl>
    </aside>
  );
}

// Approvals inbox: pending first (oldest pending at the top: it expires first), then decided ones; approve or deny with a note.
import { useEffect, useState } from 'preact/hooks';
import { get, post } from '../api.js';
import type { Approval } from '../types.js';
import { ErrorLine, Time, useAction } from '../ui.js';

export function ApprovalsPage() {
  const [pending, setPending] = useState<Approval[]>([]);
  const [decided, setDecided] = useState<Approval[]>([]);
  const [error, run] = useAction();
  const load = () => run(async () => {
    const [p, all] = await Promise.all([get<Approval[]>('/approvals?status=pending'), get<Approval[]>('/approvals')]);
    setPending([...p].reverse());
    setDecided(all.filter((a) => a.status !== 'pending'));
  });
  useEffect(() => {
    void load();
    const timer = setInterval(() => void load(), 5000);
    return () => clearInterval(timer);
  }, []);
  return (
    <section aria-labelledby="appr-h">
      <h1 id="appr-h">Approvals</h1>
      <ErrorLine message={error} />
      <h2>Pending ({pending.length})</h2>
      {pending.length === 0 && <p class="muted">Nothing waits for a decision.</p>}
      <ul class="inbox">
        {pending.map((a) => <PendingItem key={a.id} approval={a} onDecided={() => void load()} />)}
      </ul>
      <h2>Decided</h2>
      <div class="scroll">
        <table>
          <thead><tr><th scope="col">Created</th><th scope="col">Agent</th><th scope="col">Call</th><th scope="col">Status</th><th scope="col">By</th><th scope="col">Note</th></tr></thead>
          <tbody>
            {decided.map((a) => (
              <tr key={a.id}>
                <td><Time iso={a.created_at} /></td>
                <td>{a.agent_name}</td>
                <td><code>{callLine(a)}</code></td>
                <td><span class={`badge ${a.status}`}>{a.status}</span></td>
                <td>{a.decided_by ?? '—'}</td>
                <td>{a.note ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function PendingItem({ approval: a, onDecided }: { approval: Approval; onDecided: () => void }) {
  const [note, setNote] = useState('');
  const [error, run] = useAction();
  const decide = (verb: 'approve' | 'deny') => void run(async () => {
    await post(`/approvals/${a.id}/${verb}`, note === '' ? {} : { note });
    onDecided();
  });
  const noteId = `note-${a.id}`;
  return (
    <li class="card">
      <p><code>{callLine(a)}</code> by <strong>{a.agent_name}</strong>, rule <code>{a.rule_matched}</code></p>
      <p class="muted">Asked <Time iso={a.created_at} />, expires <Time iso={a.expires_at} />{a.task_id !== '' && <> · task {a.task_id}</>}</p>
      {a.reasoning !== '' && <blockquote>{a.reasoning}</blockquote>}
      <div class="row">
        <label for={noteId}>Note</label>
        <input id={noteId} value={note} onInput={(e) => setNote(e.currentTarget.value)} />
        <button type="button" class="primary" onClick={() => decide('approve')}>Approve</button>
        <button type="button" class="danger" onClick={() => decide('deny')}>Deny</button>
      </div>
      <ErrorLine message={error} />
    </li>
  );
}

/** The call as it is bound: method, host with the port it names, path and query (a retry must match each). */
function callLine(a: Approval): string {
  return `${a.action} ${a.host}${a.path}${a.query === '' ? '' : `?${a.query}`}`;
}

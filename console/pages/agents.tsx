// Agents: create (the key shown once, with a copy button), delete, the proxy URL.
import { useEffect, useState } from 'preact/hooks';
import { get, post, remove } from '../api.js';
import type { Agent } from '../types.js';
import { CopyButton, ErrorLine, Time, useAction } from '../ui.js';

export function AgentsPage() {
  const [agents, setAgents] = useState<Agent[]>([]);
  const [created, setCreated] = useState<Agent | null>(null);
  const [name, setName] = useState('');
  const [logOutputs, setLogOutputs] = useState<Agent['log_outputs']>('hash');
  const [error, run] = useAction();
  const load = () => run(async () => setAgents(await get<Agent[]>('/agents')));
  useEffect(() => void load(), []);

  const create = (e: Event) => {
    e.preventDefault();
    void run(async () => {
      setCreated(await post<Agent>('/agents', { name, log_outputs: logOutputs }));
      setName('');
      await load();
    });
  };
  return (
    <section aria-labelledby="agents-h">
      <h1 id="agents-h">Agents</h1>
      <form onSubmit={create} class="card row">
        <label>
          Name
          <input name="agent-name" required maxLength={128} value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </label>
        <label>
          Log outputs
          <select name="log-outputs" value={logOutputs} onChange={(e) => setLogOutputs(e.currentTarget.value as Agent['log_outputs'])}>
            <option value="hash">hash</option>
            <option value="full">full</option>
            <option value="none">none</option>
          </select>
        </label>
        <button type="submit" class="primary">Create agent</button>
      </form>
      {created && (
        <div class="card notice" role="status">
          <p>
            Agent <strong>{created.name}</strong> created. Its key is shown <strong>once</strong>; copy it now.
          </p>
          <p>
            <code class="secret" data-testid="api-key">{created.api_key}</code> <CopyButton text={created.api_key ?? ''} label="Copy key" />
          </p>
          <p>
            Proxy URL: <code>{created.proxy_url}</code>
          </p>
          <button type="button" class="link" onClick={() => setCreated(null)}>Hide</button>
        </div>
      )}
      <ErrorLine message={error} />
      <div class="scroll">
        <table>
          <thead>
            <tr><th scope="col">Name</th><th scope="col">Key</th><th scope="col">Outputs</th><th scope="col">Created</th><th scope="col">Proxy URL</th><th scope="col"><span class="sr-only">Actions</span></th></tr>
          </thead>
          <tbody>
            {agents.map((a) => (
              <tr key={a.id}>
                <td>{a.name}</td>
                <td><code>{a.api_key_prefix}</code></td>
                <td>{a.log_outputs}</td>
                <td><Time iso={a.created_at} /></td>
                <td><ProxyUrl agent={a} /></td>
                <td class="actions">
                  <a href={`#/policy/${encodeURIComponent(a.id)}`}>Policy</a>
                  <button
                    type="button"
                    class="danger"
                    aria-label={`Delete agent ${a.name}`}
                    onClick={() => {
                      if (confirm(`Delete agent ${a.name}? Its key stops working at once.`)) void run(async () => {
                        await remove(`/agents/${a.id}`);
                        await load();
                      });
                    }}
                  >
                    Delete
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {agents.length === 0 && <p>No agents yet.</p>}
    </section>
  );
}

function ProxyUrl({ agent }: { agent: Agent }) {
  const [info, setInfo] = useState<{ proxy_url: string; usage_example: string } | null>(null);
  if (info === null) {
    return <button type="button" class="link" aria-label={`Show proxy URL of ${agent.name}`} onClick={() => void get<{ proxy_url: string; usage_example: string }>(`/agents/${agent.id}/proxy-url`).then(setInfo)}>Show</button>;
  }
  return (
    <span>
      <code>{info.proxy_url}</code> <CopyButton text={info.usage_example} label="Copy curl" />
    </span>
  );
}

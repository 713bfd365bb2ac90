// Credentials: create by type, delete. A value is sent once and never shown (the API never returns it).
import { useEffect, useState } from 'preact/hooks';
import { get, post, remove } from '../api.js';
import type { Credential } from '../types.js';
import { ErrorLine, Time, useAction } from '../ui.js';

export function CredentialsPage() {
  const [items, setItems] = useState<Credential[]>([]);
  const [form, setForm] = useState({ name: '', hostname: '', cred_type: 'bearer' as Credential['cred_type'], value: '', extra: '' });
  const [error, run] = useAction();
  const load = () => run(async () => setItems(await get<Credential[]>('/credentials')));
  useEffect(() => void load(), []);
  const set = (field: keyof typeof form) => (e: Event) => setForm({ ...form, [field]: (e.currentTarget as HTMLInputElement).value });

  const create = (e: Event) => {
    e.preventDefault();
    const body: Record<string, string> = { name: form.name, hostname: form.hostname, cred_type: form.cred_type, value: form.value };
    if (form.cred_type === 'header' && form.extra !== '') body.header_name = form.extra;
    if (form.cred_type === 'query' && form.extra !== '') body.query_param = form.extra;
    void run(async () => {
      await post('/credentials', body);
      setForm({ ...form, name: '', hostname: '', value: '', extra: '' });
      await load();
    });
  };
  return (
    <section aria-labelledby="cred-h">
      <h1 id="cred-h">Credentials</h1>
      <form onSubmit={create} class="card row">
        <label>Name<input name="cred-name" required value={form.name} onInput={set('name')} /></label>
        <label>Hostname<input name="hostname" required placeholder="api.github.com" value={form.hostname} onInput={set('hostname')} /></label>
        <label>
          Type
          <select name="cred-type" value={form.cred_type} onChange={set('cred_type')}>
            <option value="bearer">bearer</option>
            <option value="header">header</option>
            <option value="query">query</option>
          </select>
        </label>
        {form.cred_type !== 'bearer' && (
          <label>
            {form.cred_type === 'header' ? 'Header name' : 'Query parameter'}
            <input name="extra" placeholder="(default: the name)" value={form.extra} onInput={set('extra')} />
          </label>
        )}
        <label>Value<input name="value" type="password" autoComplete="off" required value={form.value} onInput={set('value')} /></label>
        <button type="submit" class="primary">Add credential</button>
      </form>
      <ErrorLine message={error} />
      <div class="scroll">
        <table>
          <thead><tr><th scope="col">Name</th><th scope="col">Hostname</th><th scope="col">Type</th><th scope="col">Injected as</th><th scope="col">Created</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>
            {items.map((c) => (
              <tr key={c.id}>
                <td>{c.name}</td>
                <td><code>{c.hostname}</code></td>
                <td>{c.cred_type}</td>
                <td>{c.cred_type === 'bearer' ? 'Authorization: Bearer …' : c.cred_type === 'header' ? `${c.header_name}: …` : `?${c.query_param}=…`}</td>
                <td><Time iso={c.created_at} /></td>
                <td>
                  <button type="button" class="danger" aria-label={`Delete credential ${c.name}`} onClick={() => {
                    if (confirm(`Delete credential ${c.name}?`)) void run(async () => {
                      await remove(`/credentials/${c.id}`);
                      await load();
                    });
                  }}>Delete</button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {items.length === 0 && <p>No credentials yet. Values are encrypted at rest and never shown again.</p>}
    </section>
  );
}

// One agent's policy: the YAML editor (a validation error names its line, which
// is marked in the gutter and selected in the text), "check a call" against the
// text being edited, and a replay preview over the last 7 days' calls.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, get, post, problem } from '../api.js';
import type { Agent, Replay } from '../types.js';
import { ErrorLine, Time, useAction } from '../ui.js';

const STARTER = 'version: "1"\ndefault: allow\nrules:\n  - name: no-deletes\n    tool: "*"\n    action: DELETE\n    decision: deny\n';

/** The line a validation message names ("line 7", "rule 2 (line 7)"), if any. */
export function errorLine(message: string): number | null {
  const m = /\bline (\d+)/.exec(message);
  return m ? Number(m[1]) : null;
}

export function PolicyPage({ agentId }: { agentId: string }) {
  const [agent, setAgent] = useState<Agent | null>(null);
  const [yaml, setYaml] = useState('');
  const [saved, setSaved] = useState<string | null>(null);
  const [loaded, setLoaded] = useState(false);
  const [invalid, setInvalid] = useState<{ message: string; line: number | null } | null>(null);
  const [error, run] = useAction();
  const text = useRef<HTMLTextAreaElement>(null);

  useEffect(() => {
    void run(async () => {
      const agents = await get<Agent[]>('/agents');
      setAgent(agents.find((a) => a.id === agentId) ?? null);
      const policy = await get<{ rules_yaml: string | null; updated_at: string | null }>(`/agents/${encodeURIComponent(agentId)}/policy`);
      setYaml(policy.rules_yaml ?? STARTER);
      setSaved(policy.updated_at);
      setLoaded(true);
    });
  }, [agentId]);

  const showLine = (line: number) => {
    const area = text.current;
    if (area === null) return;
    const lines = area.value.split('\n');
    const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
    area.focus();
    area.setSelectionRange(start, start + (lines[line - 1]?.length ?? 0));
  };

  const save = (e: Event) => {
    e.preventDefault();
    setInvalid(null);
    void run(async () => {
      try {
        const answer = await post<{ updated_at: string }>(`/agents/${encodeURIComponent(agentId)}/policy`, { rules_yaml: yaml });
        setSaved(answer.updated_at);
      } catch (err) {
        if (err instanceof ApiError && err.code === 'invalid_policy') {
          const line = errorLine(err.message);
          setInvalid({ message: err.message, line });
          if (line !== null) showLine(line);
          return;
        }
        throw err;
      }
    });
  };

  const lineCount = yaml.split('\n').length;
  if (!loaded) return <section aria-busy="true"><p>Loading the policy…</p><ErrorLine message={error} /></section>;
  return (
    <section aria-labelledby="policy-h">
      <h1 id="policy-h">Policy of {agent?.name ?? 'agent'}</h1>
      <p><a href="#/agents">← Agents</a> · <span role="status">{saved ? <>saved <Time iso={saved} /></> : 'no policy set: every call is allowed'}</span></p>
      <ErrorLine message={error} />
      <form onSubmit={save} class="card">
        <label for="policy-yaml">Policy (YAML)</label>
        <div class="editor">
          <ol class="gutter" aria-hidden="true">
            {Array.from({ length: lineCount }, (_, i) => (
              <li class={invalid?.line === i + 1 ? 'bad' : undefined}>{i + 1}</li>
            ))}
          </ol>
          <textarea
            id="policy-yaml"
            ref={text}
            spellcheck={false}
            rows={Math.max(12, lineCount + 1)}
            aria-invalid={invalid !== null}
            aria-describedby={invalid ? 'policy-error' : undefined}
            value={yaml}
            onInput={(e) => setYaml(e.currentTarget.value)}
          />
        </div>
        {invalid && (
          <p id="policy-error" class="error" role="alert">
            {invalid.line !== null && (
              <button type="button" class="link" onClick={() => showLine(invalid.line!)}>Line {invalid.line}:</button>
            )}{' '}
            {invalid.message}
          </p>
        )}
        <button type="submit" class="primary">Save policy</button>
      </form>
      <CheckCall agentId={agentId} yaml={yaml} />
      <ReplayPreview agentId={agentId} yaml={yaml} />
    </section>
  );
}

function CheckCall({ agentId, yaml }: { agentId: string; yaml: string }) {
  const [call, setCall] = useState({ tool: 'api.github.com', action: 'GET', path: '/', reasoning: '' });
  const [answer, setAnswer] = useState<{ decision: string; message: string; rule_matched: string } | null>(null);
  const [error, run] = useAction();
  const set = (field: keyof typeof call) => (e: Event) => setCall({ ...call, [field]: (e.currentTarget as HTMLInputElement).value });
  return (
    <form class="card" aria-labelledby="check-h" onSubmit={(e) => {
      e.preventDefault();
      void run(async () => setAnswer(await post('/policy/check', { agent_id: agentId, rules_yaml: yaml, ...call })));
    }}>
      <h2 id="check-h">Check a call</h2>
      <div class="row">
        <label>Tool (host)<input name="check-tool" required value={call.tool} onInput={set('tool')} /></label>
        <label>Action<input name="check-action" required value={call.action} onInput={set('action')} /></label>
        <label>Path<input name="check-path" value={call.path} onInput={set('path')} /></label>
        <label>Reasoning<input name="check-reasoning" value={call.reasoning} onInput={set('reasoning')} /></label>
        <button type="submit">Check</button>
      </div>
      <ErrorLine message={error} />
      {answer && (
        <p role="status" class={`decision ${answer.decision}`}>
          <strong>{answer.decision}</strong> — {answer.message} (rule <code>{answer.rule_matched}</code>)
        </p>
      )}
    </form>
  );
}

function ReplayPreview({ agentId, yaml }: { agentId: string; yaml: string }) {
  const [replay, setReplay] = useState<Replay | null>(null);
  const [error, setError] = useState<string | null>(null);
  const preview = () => {
    setError(null);
    post<Replay>('/policy/replay', { agent_id: agentId, rules_yaml: yaml }).then(setReplay, (err: unknown) => setError(problem(err)));
  };
  return (
    <div class="card" aria-labelledby="replay-h">
      <h2 id="replay-h">Replay preview</h2>
      <p>Evaluates the text above against this agent's proxied calls of the last 7 days.</p>
      <button type="button" onClick={preview}>Preview</button>
      <ErrorLine message={error} />
      {replay && (
        <div role="status">
          <p class="replay-summary">
            Would have blocked <strong>{replay.allow_to_deny}</strong> of the last 7 days' {replay.total} calls, and let through{' '}
            <strong>{replay.deny_to_allow}</strong> that were denied ({replay.unchanged} unchanged).
          </p>
          {replay.samples.length > 0 && (
            <div class="scroll">
              <table>
                <thead><tr><th scope="col">When</th><th scope="col">Call</th><th scope="col">Was</th><th scope="col">Would be</th><th scope="col">Rule</th></tr></thead>
                <tbody>
                  {replay.samples.map((s) => (
                    <tr key={s.audit_id}>
                      <td><Time iso={s.timestamp} /></td>
                      <td><code>{s.action} {s.tool_name}{s.path}</code></td>
                      <td>{s.decision}</td>
                      <td>{s.would_decision}</td>
                      <td><code>{s.would_rule}</code></td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </div>
      )}
    </div>
  );
}

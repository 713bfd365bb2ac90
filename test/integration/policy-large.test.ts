// Large policies through one all-in-one process (the proxy shares its event
// loop with the admin API): setting one no longer holds the proxied calls for
// the yaml library's parse, and an organization asking for many at once waits
// its share while another organization's are read.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import t from 'tap';
import { parsePolicy } from '../../shared/policy/index.js';
import { api, createAgent, signup, type Session } from '../support/service.js';
import { startTestService } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';

const upstream = await startUpstream();
const service = await startTestService();
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

/** 245 KB of small rules, the yaml library's worst shape, then a rule that denies /admin/**; `tag` makes each text new. */
function largePolicy(tag: string): string {
  let yaml = `version: "1"  # ${tag}\nrules:\n  - {name: no-admin, tool: "*", action: GET, path: /admin/**, decision: deny}\n`;
  for (let i = 0; yaml.length < 245_000; i++) yaml += `  - {name: r${i}, tool: "t${i}.example.com", action: GET, decision: allow}\n`;
  return yaml;
}

t.test('setting a 245 KB policy holds the event loop for a fraction of parsing it there, while calls are proxied', async (t) => {
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'large', 'none');
  const call = async (path: string) => {
    const res = await fetch(`${service.url}/proxy/${agent.api_key}/${upstream.authority}${path}`);
    await res.arrayBuffer();
    return res.status;
  };
  // What parsing one on the event loop costs on this machine now.
  const parsed: number[] = [];
  for (let i = 0; i < 3; i++) {
    const started = performance.now();
    parsePolicy(largePolicy(`parsed ${i}`));
    parsed.push(performance.now() - started);
  }
  let calling = true;
  let calls = 0;
  const load = (async () => {
    while (calling) if ((await call('/json')) === 200) calls++;
  })();
  const delay = monitorEventLoopDelay({ resolution: 2 });
  delay.enable();
  for (let i = 0; i < 3; i++) {
    const set = await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: largePolicy(`set ${i}`) });
    t.equal(set.status, 200, set.text.slice(0, 200));
  }
  delay.disable();
  calling = false;
  await load;
  const longest = delay.max / 1e6;
  const median = [...parsed].sort((a, b) => a - b)[1]!;
  t.ok(longest < median / 2, `the event loop's longest wait while 3 were set: ${longest.toFixed(0)} ms; parsing one on it: ${parsed.map((ms) => ms.toFixed(0)).join(', ')} ms (${calls} calls proxied meanwhile)`);
  t.equal(await call('/admin/x'), 403, 'the proxy decides with the policy set last');
  t.equal(await call('/json'), 200);
});

t.test('an organization asking for many large policies at once waits its share (429, limit jobs); another is read meanwhile', async (t) => {
  const orgs: { session: Session; agentId: string }[] = [];
  for (const name of ['greedy', 'other']) {
    const session = await signup(service.url);
    orgs.push({ session, agentId: (await createAgent(service.url, session, name, 'none')).id });
  }
  const check = ({ session, agentId }: { session: Session; agentId: string }, tag: string) =>
    api(service.url, session, 'POST', '/policy/check', { agent_id: agentId, tool: 'api.example.com', action: 'GET', path: '/admin/x', reasoning: '', rules_yaml: largePolicy(tag) });
  // Five new texts of one organization at once: one is read, two wait, the others (asked
  // within the ~0.2 s the first takes) are refused. The first three always fit.
  const asked = Array.from({ length: 5 }, (_, i) => check(orgs[0]!, `greedy ${i}`));
  const theirs = check(orgs[1]!, 'other');
  const answers = await Promise.all(asked);
  const statuses = answers.map((res) => res.status);
  t.ok(statuses.filter((s) => s === 200).length >= 3, `the one read and the two waiting are answered (${statuses.join(', ')})`);
  t.ok(statuses.includes(429), `the rest are refused (${statuses.join(', ')})`);
  for (const res of answers) {
    if (res.status === 200) t.match(res.json, { decision: 'deny', rule_matched: 'no-admin' });
    else {
      t.match(res.json, { error: 'rate_limited', limit: 'jobs', retry_after: 5, message: /^2 policy readings of this organization are waiting to run/ }, res.text);
      t.equal(res.headers.get('retry-after'), '5');
    }
  }
  const answer = await theirs;
  t.equal(answer.status, 200, `another organization's, asked meanwhile, is read: ${answer.text.slice(0, 200)}`);
  t.match(answer.json, { decision: 'deny', rule_matched: 'no-admin' });
  // A text read before is compiled at once, not queued: ten of them at once are all answered.
  const read = statuses.indexOf(200);
  const known = await Promise.all(Array.from({ length: 10 }, () => check(orgs[0]!, `greedy ${read}`)));
  t.strictSame(known.map((res) => res.status), Array(10).fill(200), 'a text compiled before needs no reading');
});

// Agents, policies and credentials through the admin API of the real service.
import { randomBytes } from 'node:crypto';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { assertError } from '../support/checks.js';
import { api, createAgent, signup, startTestService } from '../support/service.js';
import { ORG_AGENTS_MAX, ORG_CREDENTIALS_MAX } from '../../shared/stores/metadata-store.js';

const PUBLIC_URL = 'http://guard.test:9999';
const service = await startTestService({ PUBLIC_URL });
const base = service.url;
t.teardown(() => service.close());

const owner = await signup(base);
const stranger = await signup(base);


const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

t.test('agents', async (t) => {
  t.test('create answers 201 with the key once, its prefix and the proxy URL', async (t) => {
    const before = Date.now();
    const res = await api(base, owner, 'POST', '/agents', { name: 'Research bot', log_outputs: 'full' });
    t.equal(res.status, 201);
    const a = res.json;
    t.same(Object.keys(a).sort(), ['api_key', 'api_key_prefix', 'created_at', 'id', 'log_outputs', 'name', 'proxy_url']);
    t.match(a.id, UUID);
    t.equal(a.name, 'Research bot');
    t.equal(a.log_outputs, 'full');
    t.match(a.api_key, /^agk_[0-9A-Za-z]{40}$/);
    t.equal(a.api_key_prefix, `${a.api_key.slice(0, 12)}...`);
    t.equal(a.proxy_url, `${PUBLIC_URL}/proxy/${a.api_key}/`, 'built from PUBLIC_URL, trailing slash');
    t.match(a.created_at, ISO_MS);
    t.ok(Date.parse(a.created_at) >= before - 1000 && Date.parse(a.created_at) <= Date.now() + 1000, 'created_at is now');
    const other = await createAgent(base, owner, 'second');
    t.not(other.api_key, a.api_key, 'every key is new');
    t.not(other.id, a.id);
  });

  t.test('log_outputs defaults to hash and accepts full, hash, none only', async (t) => {
    const res = await api(base, owner, 'POST', '/agents', { name: 'defaulted' });
    t.equal(res.status, 201);
    t.equal(res.json.log_outputs, 'hash');
    for (const mode of ['full', 'hash', 'none']) {
      t.equal((await api(base, owner, 'POST', '/agents', { name: `mode-${mode}`, log_outputs: mode })).json.log_outputs, mode);
    }
    for (const bad of ['FULL', 'all', '', 3, true]) {
      assertError(t, await api(base, owner, 'POST', '/agents', { name: 'x', log_outputs: bad }), 400, 'invalid_request', 'log_outputs');
    }
  });

  t.test('name is a required string of 1 to 128 characters', async (t) => {
    for (const body of [{ name: '' }, { name: 'n'.repeat(129) }, { name: 42 }, { name: ['a'] }, {}, { log_outputs: 'hash' }, { name: '   ' }]) {
      assertError(t, await api(base, owner, 'POST', '/agents', body), 400, 'invalid_request', 'name');
    }
    const longest = await api(base, owner, 'POST', '/agents', { name: 'n'.repeat(128) });
    t.equal(longest.status, 201, '128 characters is allowed');
    t.equal(longest.json.name, 'n'.repeat(128));
    const unicode = await api(base, owner, 'POST', '/agents', { name: 'ü'.repeat(128) });
    t.equal(unicode.status, 201, 'the limit counts characters, not bytes');
  });

  t.test('list is oldest first and never contains api_key', async (t) => {
    const org = await signup(base);
    const created = [];
    for (const name of ['alpha', 'beta', 'gamma']) created.push(await createAgent(base, org, name));
    const res = await api(base, org, 'GET', '/agents');
    t.equal(res.status, 200);
    t.same(res.json.map((a: { name: string }) => a.name), ['alpha', 'beta', 'gamma'], 'oldest first');
    for (const [i, a] of (res.json as Array<Record<string, unknown>>).entries()) {
      t.same(Object.keys(a).sort(), ['api_key_prefix', 'created_at', 'id', 'log_outputs', 'name']);
      t.equal(a.id, created[i]!.id);
      t.equal(a.api_key_prefix, created[i]!.api_key_prefix);
    }
    for (const a of created) t.notOk(res.text.includes(a.api_key.slice(12)), 'no key material past the prefix');
    t.notOk(res.text.includes('api_key"'), 'no api_key field');
  });

  t.test('proxy-url answers the URL with the <API_KEY> placeholder and a usage example', async (t) => {
    const a = await createAgent(base, owner, 'url-agent');
    const res = await api(base, owner, 'GET', `/agents/${a.id}/proxy-url`);
    t.equal(res.status, 200);
    t.same(Object.keys(res.json).sort(), ['api_key_prefix', 'proxy_url', 'usage_example']);
    t.equal(res.json.proxy_url, `${PUBLIC_URL}/proxy/<API_KEY>/`);
    t.equal(res.json.api_key_prefix, a.api_key_prefix);
    t.match(res.json.usage_example, /^curl /, 'a curl line');
    t.ok(res.json.usage_example.includes(`${PUBLIC_URL}/proxy/<API_KEY>/`), 'the example uses proxy_url');
    t.notOk(res.text.includes(a.api_key), 'the full key is not repeated');
    const upper = await api(base, owner, 'GET', `/agents/${a.id.toUpperCase()}/proxy-url`);
    t.equal(upper.status, 200, 'the id is case-insensitive (a UUID)');
  });

  t.test('delete answers 204; afterwards every route of that agent is 404', async (t) => {
    const a = await createAgent(base, owner, 'doomed');
    const keep = await createAgent(base, owner, 'kept');
    t.equal((await api(base, owner, 'POST', `/agents/${a.id}/policy`, { rules_yaml: 'version: "1"\nrules: []\n' })).status, 200);
    const del = await api(base, owner, 'DELETE', `/agents/${a.id}`);
    t.equal(del.status, 204);
    t.equal(del.text, '', 'no body');
    assertError(t, await api(base, owner, 'GET', `/agents/${a.id}/proxy-url`), 404, 'not_found');
    assertError(t, await api(base, owner, 'GET', `/agents/${a.id}/policy`), 404, 'not_found');
    assertError(t, await api(base, owner, 'POST', `/agents/${a.id}/policy`, { rules_yaml: 'version: "1"\nrules: []\n' }), 404, 'not_found');
    assertError(t, await api(base, owner, 'DELETE', `/agents/${a.id}`), 404, 'not_found');
    assertError(t, await api(base, owner, 'POST', '/policy/check', { agent_id: a.id, tool: 't', action: 'GET', reasoning: '' }), 404, 'not_found');
    const names = (await api(base, owner, 'GET', '/agents')).json.map((x: { id: string }) => x.id);
    t.notOk(names.includes(a.id), 'gone from the list');
    t.ok(names.includes(keep.id), 'the other agent stays');
    const proxied = await fetch(`${base}/proxy/${a.api_key}/127.0.0.1:1/`);
    t.equal(proxied.status, 401, 'the key is revoked at once');
    t.equal(((await proxied.json()) as { error: string }).error, 'invalid_api_key');
  });

  t.test('an id that is not a UUID, or an unknown UUID, is 404', async (t) => {
    for (const id of ['not-a-uuid', '123', encodeURIComponent("' OR 1=1 --"), `${crypto.randomUUID()}x`, crypto.randomUUID()]) {
      assertError(t, await api(base, owner, 'GET', `/agents/${id}/proxy-url`), 404, 'not_found');
      assertError(t, await api(base, owner, 'GET', `/agents/${id}/policy`), 404, 'not_found');
      assertError(t, await api(base, owner, 'DELETE', `/agents/${id}`), 404, 'not_found');
    }
  });
});

t.test('policy', async (t) => {
  const agent = await createAgent(base, owner, 'policed');
  const yamlV1 = [
    'version: "1"',
    'rules:',
    '  - name: no-deletes',
    '    tool: "*"',
    '    action: DELETE',
    '    decision: deny',
    '    message: "Deletes need a human."',
    '  - tool: api.github.com',
    '    action: GET',
    '    decision: allow',
    '  - tool: "*.internal.example"',
    '    action: "*"',
    '    decision: deny',
    '',
  ].join('\n');

  t.test('with none set GET answers nulls', async (t) => {
    const res = await api(base, owner, 'GET', `/agents/${agent.id}/policy`);
    t.equal(res.status, 200);
    t.same(res.json, { agent_id: agent.id, rules_yaml: null, updated_at: null });
    const check = await api(base, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: 'api.x.com', action: 'DELETE', reasoning: '' });
    t.same(check.json, { decision: 'allow', rule_matched: 'default', message: check.json.message, approval_timeout: null, shadow_rule: null, shadow_decision: null, limits: [] }, 'no policy allows everything');
    t.type(check.json.message, 'string');
  });

  t.test('set answers 200 {agent_id, rules_yaml, updated_at}; set again replaces it', async (t) => {
    const first = await api(base, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: 'version: "1"\ndefault: deny\nrules: []\n' });
    t.equal(first.status, 200);
    t.same(Object.keys(first.json).sort(), ['agent_id', 'rules_yaml', 'updated_at']);
    t.equal(first.json.agent_id, agent.id);
    t.equal(first.json.rules_yaml, 'version: "1"\ndefault: deny\nrules: []\n');
    t.match(first.json.updated_at, ISO_MS);
    const got = await api(base, owner, 'GET', `/agents/${agent.id}/policy`);
    t.same(got.json, first.json, 'GET answers what was set');
    await new Promise((r) => setTimeout(r, 5));
    const second = await api(base, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: yamlV1 });
    t.equal(second.status, 200);
    t.equal(second.json.rules_yaml, yamlV1, 'the text is kept as sent');
    t.ok(Date.parse(second.json.updated_at) > Date.parse(first.json.updated_at), 'updated_at moves on');
    const again = await api(base, owner, 'GET', `/agents/${agent.id}/policy`);
    t.same(again.json, second.json, 'replaced, not merged');
  });

  t.test('Accept: application/yaml answers the YAML text itself', async (t) => {
    const res = await fetch(`${base}/agents/${agent.id}/policy`, { headers: { ...owner.auth, accept: 'application/yaml' } });
    t.equal(res.status, 200);
    t.match(res.headers.get('content-type') ?? '', /^application\/yaml/);
    t.equal(await res.text(), yamlV1);
    const json = await api(base, owner, 'GET', `/agents/${agent.id}/policy`, undefined, { accept: 'application/json' });
    t.equal(json.json.rules_yaml, yamlV1, 'JSON otherwise');
  });

  t.test('an invalid policy is 400 invalid_policy naming the line, and the old one stays', async (t) => {
    const fixtures = new URL('../fixtures/policies/', import.meta.url);
    const cases: Array<[string, RegExp]> = [
      [readFileSync(new URL('unknown-key.yaml', fixtures), 'utf8'), /line 7/],
      ['version: "1"\nrules:\n  - tool: "*"\n    action: GET\n    decision: maybe\n', /line 5/],
      ['version: "1"\nrules:\n  - tool: x\n    decision: deny\n', /rule 1 \(line 3\)/],
      ['version: "1"\nrules: [\n', /line \d+/],
      ['- just\n- a list\n', /line 1/],
      ['rules: []\n', /line 1/],
      [readFileSync(new URL('alias-bomb.yaml', fixtures), 'utf8'), /line \d+.*alias/],
      [`version: "1"\nrules:\n${'  - {tool: "t.example.com", action: GET, decision: deny}\n'.repeat(5000)}`, /256 KiB/],
    ];
    for (const [text, where] of cases) {
      const res = await api(base, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: text });
      assertError(t, res, 400, 'invalid_policy');
      t.match(res.json.message, where, `names where: ${res.json.message}`);
    }
    t.match(
      (await api(base, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: cases[0]![0] })).json.message,
      /decison/,
      'names the unknown key',
    );
    assertError(t, await api(base, owner, 'POST', `/agents/${agent.id}/policy`, {}), 400, 'invalid_request', 'rules_yaml');
    assertError(t, await api(base, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: 7 }), 400, 'invalid_request', 'rules_yaml');
    t.equal((await api(base, owner, 'GET', `/agents/${agent.id}/policy`)).json.rules_yaml, yamlV1, 'unchanged');
  });

  t.test('check answers the decision, the rule that matched and a message', async (t) => {
    const check = (tool: string, action: string, agentId = agent.id) =>
      api(base, owner, 'POST', '/policy/check', { agent_id: agentId, tool, action, reasoning: 'because' });
    const named = await check('api.github.com', 'DELETE');
    t.equal(named.status, 200);
    t.same(named.json, { decision: 'deny', rule_matched: 'no-deletes', message: 'Deletes need a human.', approval_timeout: null, shadow_rule: null, shadow_decision: null, limits: [] }, "a named rule, with its own message");
    const numbered = await check('api.github.com', 'get');
    t.same(numbered.json.decision, 'allow');
    t.equal(numbered.json.rule_matched, 'rule-2', 'an unnamed rule is rule-<n>, 1-based');
    t.match(numbered.json.message, /rule-2/, 'the message names the rule');
    t.match(numbered.json.message, /allow/i, 'and its decision');
    const glob = await check('db.internal.example', 'POST');
    t.equal(glob.json.decision, 'deny');
    t.equal(glob.json.rule_matched, 'rule-3');
    t.match(glob.json.message, /rule-3/);
    t.match(glob.json.message, /den/i);
    const fallback = await check('api.other.com', 'GET');
    t.equal(fallback.json.decision, 'allow');
    t.equal(fallback.json.rule_matched, 'default');
    t.match(fallback.json.message, /default/);
    const empty = await api(base, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: 'API.GITHUB.COM', action: 'GET', reasoning: '' });
    t.equal(empty.json.rule_matched, 'rule-2', 'an empty reasoning is allowed; tool matching ignores case');
  });

  t.test('check: missing or mistyped fields are 400, another org\'s agent is 404', async (t) => {
    const full = { agent_id: agent.id, tool: 'x', action: 'GET', reasoning: '' };
    for (const field of ['agent_id', 'tool', 'action', 'reasoning'] as const) {
      const { [field]: _dropped, ...rest } = full;
      assertError(t, await api(base, owner, 'POST', '/policy/check', rest), 400, 'invalid_request', field);
      assertError(t, await api(base, owner, 'POST', '/policy/check', { ...full, [field]: 12 }), 400, 'invalid_request', field);
    }
    const theirs = await createAgent(base, stranger, 'theirs');
    assertError(t, await api(base, owner, 'POST', '/policy/check', { ...full, agent_id: theirs.id }), 404, 'not_found');
    assertError(t, await api(base, owner, 'POST', '/policy/check', { ...full, agent_id: 'nope' }), 404, 'not_found');
    t.equal((await api(base, stranger, 'POST', '/policy/check', { ...full, agent_id: theirs.id })).status, 200, 'the owner may');
    // The proxy reads a tool only from tools/call, prompts/get and resources/read: a check
    // naming one for another method would decide a call the proxy never sees.
    assertError(t, await api(base, owner, 'POST', '/policy/check', { ...full, mcp_method: 'tools/list', mcp_tool: 'x' }), 400, 'invalid_request', 'mcp_tool');
    for (const [method, tool] of [['tools/call', 'x'], ['prompts/get', 'x'], ['resources/read', 'file:///x']]) {
      t.equal((await api(base, owner, 'POST', '/policy/check', { ...full, mcp_method: method, mcp_tool: tool })).status, 200, `${method} names a tool`);
    }
  });
});

t.test('credentials', async (t) => {
  const SECRET = `sk-live-${crypto.randomUUID()}-do-not-leak`;

  t.test('create answers 201 with the record, never the value', async (t) => {
    const res = await api(base, owner, 'POST', '/credentials', { name: 'github', hostname: 'api.github.com', cred_type: 'bearer', value: SECRET });
    t.equal(res.status, 201);
    t.same(Object.keys(res.json).sort(), ['created_at', 'cred_type', 'hostname', 'id', 'name']);
    t.match(res.json.id, UUID);
    t.equal(res.json.name, 'github');
    t.equal(res.json.hostname, 'api.github.com');
    t.equal(res.json.cred_type, 'bearer');
    t.match(res.json.created_at, ISO_MS);
    t.notOk(res.text.includes(SECRET), 'the value is not echoed');
  });

  t.test('list never contains a value', async (t) => {
    const res = await api(base, owner, 'GET', '/credentials');
    t.equal(res.status, 200);
    t.equal(res.json.length, 1);
    t.equal(res.json[0].hostname, 'api.github.com');
    t.notOk(res.text.includes(SECRET), 'the value is nowhere in the response');
    t.notOk(res.text.includes('"value"'), 'no value field');
    t.notOk(res.text.includes('sealed'), 'no sealed value either');
  });

  t.test('the value is encrypted at rest: it is not in the SQLite file or its WAL', async (t) => {
    const files = ['metadata.sqlite', 'metadata.sqlite-wal'].map((f) => join(service.dataDir, f)).filter((f) => existsSync(f));
    t.ok(files.length > 0, 'the SQLite file exists');
    const bytes = Buffer.concat(files.map((f) => readFileSync(f)));
    t.ok(bytes.includes(Buffer.from('api.github.com')), 'the hostname is stored there (so the search reads the right bytes)');
    t.notOk(bytes.includes(Buffer.from(SECRET)), 'the value is not stored in plaintext');
    t.notOk(bytes.includes(Buffer.from(SECRET.slice(8, 44))), 'nor a large piece of it');
    t.notOk(bytes.includes(Buffer.from(Buffer.from(SECRET).toString('base64'))), 'nor base64 of it');
  });

  t.test('hostnames are normalised', async (t) => {
    const org = await signup(base);
    const cases: Array<[string, string]> = [
      ['API.Upper.COM', 'api.upper.com'],
      // A port written is kept, 443 too: such a credential matches that port only (CONTRACT.md, Clarifications).
      ['api.x.com:443', 'api.x.com:443'],
      ['API.w.com.:0443', 'api.w.com:443'],
      ['[::1]:443', '[::1]:443'],
      ['api.y.com:8443', 'api.y.com:8443'],
      ['127.0.0.1:9000', '127.0.0.1:9000'],
      ['  spaced.example.com ', 'spaced.example.com'],
      // Written as the URL parser writes them, as the proxy reads a target (docs/api.md, decision 14).
      ['127.1', '127.0.0.1'],
      ['[0:0::1]:8443', '[::1]:8443'],
    ];
    for (const [hostname, stored] of cases) {
      const res = await api(base, org, 'POST', '/credentials', { name: 'c', hostname, cred_type: 'bearer', value: 'v' });
      t.equal(res.status, 201, `${hostname} (${res.text})`);
      t.equal(res.json.hostname, stored, `${JSON.stringify(hostname)} → ${stored}`);
    }
    const listed = (await api(base, org, 'GET', '/credentials')).json.map((c: { hostname: string }) => c.hostname);
    t.same(listed, cases.map(([, stored]) => stored), 'stored normalised, oldest first');
  });

  t.test('an invalid hostname is 400 naming the field', async (t) => {
    for (const hostname of ['https://x', 'x/y', 'user@x', '', '   ', 'x?y', 'x#y', 'a b', 'x:99999', 'x:abc', 'http://api.z.com/', 42]) {
      const res = await api(base, owner, 'POST', '/credentials', { name: 'bad', hostname, cred_type: 'bearer', value: 'v' });
      assertError(t, res, 400, 'invalid_request', 'hostname');
    }
  });

  t.test('cred_type must be bearer, header or query; name and value are required', async (t) => {
    for (const cred_type of ['Bearer', 'basic', '', undefined, 1]) {
      assertError(t, await api(base, owner, 'POST', '/credentials', { name: 'c', hostname: 'ct.example.com', cred_type, value: 'v' }), 400, 'invalid_request', 'cred_type');
    }
    assertError(t, await api(base, owner, 'POST', '/credentials', { hostname: 'ct.example.com', cred_type: 'bearer', value: 'v' }), 400, 'invalid_request', 'name');
    assertError(t, await api(base, owner, 'POST', '/credentials', { name: 'c', hostname: 'ct.example.com', cred_type: 'bearer' }), 400, 'invalid_request', 'value');
    assertError(t, await api(base, owner, 'POST', '/credentials', { name: 'c', hostname: 'ct.example.com', cred_type: 'bearer', value: '' }), 400, 'invalid_request', 'value');
    assertError(t, await api(base, owner, 'POST', '/credentials', { name: 'c', hostname: 'ct.example.com', cred_type: 'bearer', value: 'a\r\nX-Evil: 1' }), 400, 'invalid_request', 'value');
    // undici refuses control characters in a header and sends U+0080-U+00FF as Latin-1 bytes: not what was typed.
    for (const [credType, value] of [['bearer', 'tok\u0001en'], ['header', 'tok€n'], ['bearer', 'päss'], ['header', 'a\u007f']]) {
      assertError(t, await api(base, owner, 'POST', '/credentials', { name: 'c', hostname: 'ct.example.com', cred_type: credType, value }), 400, 'invalid_request', 'value');
    }
    // The upstream drops outer whitespace, then echoes the value without it, past the audit's redaction of the stored one.
    for (const [credType, value] of [['bearer', 'sk-live-abc '], ['header', '\tsk-live-abc'], ['bearer', ' ']]) {
      assertError(t, await api(base, owner, 'POST', '/credentials', { name: 'c', hostname: 'ct.example.com', cred_type: credType, value }), 400, 'invalid_request', 'value');
    }
    const other = await signup(base); // the owner's credential list is checked below
    const spaced = await api(base, other, 'POST', '/credentials', { name: 'c', hostname: 'spaced.example.com', cred_type: 'header', value: 'key\twith spaces ~!' });
    t.equal(spaced.status, 201, 'printable ASCII, spaces and tabs are a header value');
    const queried = await api(base, other, 'POST', '/credentials', { name: 'c', hostname: 'query.example.com', cred_type: 'query', value: 'päss€' });
    t.equal(queried.status, 201, 'a query value is percent-encoded: anything goes');
  });

  t.test('header credentials: header_name defaults to the name and must be a valid header name', async (t) => {
    const org = await signup(base);
    const byName = await api(base, org, 'POST', '/credentials', { name: 'X-Api-Key', hostname: 'h1.example.com', cred_type: 'header', value: 'v' });
    t.equal(byName.status, 201);
    t.equal(byName.json.header_name.toLowerCase(), 'x-api-key', 'defaults to the name');
    t.notOk('query_param' in byName.json);
    const explicit = await api(base, org, 'POST', '/credentials', { name: 'my key', hostname: 'h2.example.com', cred_type: 'header', header_name: 'X-Token', value: 'v' });
    t.equal(explicit.status, 201);
    t.equal(explicit.json.header_name.toLowerCase(), 'x-token');
    // Expect: undici refuses it, so every call to the host would fail (502); X-Approval-Id is the proxy's own.
    for (const header_name of ['bad header', 'x:y', 'host', 'Content-Length', 'Expect', 'X-Approval-Id', '']) {
      assertError(t, await api(base, org, 'POST', '/credentials', { name: 'n', hostname: 'h3.example.com', cred_type: 'header', header_name, value: 'v' }), 400, 'invalid_request', 'header_name');
    }
    assertError(t, await api(base, org, 'POST', '/credentials', { name: 'not a header', hostname: 'h3.example.com', cred_type: 'header', value: 'v' }), 400, 'invalid_request', 'name');
    const nullName = await api(base, org, 'POST', '/credentials', { name: 'not a header', hostname: 'h3.example.com', cred_type: 'header', header_name: null, value: 'v' });
    assertError(t, nullName, 400, 'invalid_request');
    t.equal(nullName.json.field, 'name', 'header_name null is absent: the bad default is the name\'s');
    const listed = (await api(base, org, 'GET', '/credentials')).json;
    t.same(listed.map((c: { header_name?: string }) => c.header_name?.toLowerCase()), ['x-api-key', 'x-token'], 'list shows header_name');
  });

  t.test('query credentials: query_param defaults to the name', async (t) => {
    const org = await signup(base);
    const byName = await api(base, org, 'POST', '/credentials', { name: 'api_key', hostname: 'q1.example.com', cred_type: 'query', value: 'v' });
    t.equal(byName.status, 201);
    t.equal(byName.json.query_param, 'api_key');
    t.notOk('header_name' in byName.json);
    const explicit = await api(base, org, 'POST', '/credentials', { name: 'maps', hostname: 'q2.example.com', cred_type: 'query', query_param: 'key', value: 'v' });
    t.equal(explicit.json.query_param, 'key');
    const listed = (await api(base, org, 'GET', '/credentials')).json;
    t.same(listed.map((c: { query_param?: string }) => c.query_param), ['api_key', 'key']);
  });

  t.test('one credential per hostname per organization', async (t) => {
    const dup = await api(base, owner, 'POST', '/credentials', { name: 'again', hostname: 'API.GITHUB.COM.', cred_type: 'header', value: 'other' });
    assertError(t, dup, 409, 'conflict');
    const otherPort = await api(base, owner, 'POST', '/credentials', { name: 'ported', hostname: 'api.github.com:8443', cred_type: 'bearer', value: 'v' });
    t.equal(otherPort.status, 201, 'another port is another host');
    const otherOrg = await api(base, stranger, 'POST', '/credentials', { name: 'theirs', hostname: 'api.github.com', cred_type: 'bearer', value: 'theirs' });
    t.equal(otherOrg.status, 201, 'another organization may use the same hostname');
    const mine = (await api(base, owner, 'GET', '/credentials')).json;
    t.same(mine.map((c: { name: string }) => c.name), ['github', 'ported'], "the other org's credential is not in my list");
  });

  t.test('delete answers 204, then 404', async (t) => {
    const list = (await api(base, owner, 'GET', '/credentials')).json as Array<{ id: string; name: string }>;
    const target = list.find((c) => c.name === 'ported')!;
    const del = await api(base, owner, 'DELETE', `/credentials/${target.id}`);
    t.equal(del.status, 204);
    t.equal(del.text, '');
    assertError(t, await api(base, owner, 'DELETE', `/credentials/${target.id}`), 404, 'not_found');
    assertError(t, await api(base, owner, 'DELETE', '/credentials/not-a-uuid'), 404, 'not_found');
    assertError(t, await api(base, owner, 'DELETE', `/credentials/${crypto.randomUUID()}`), 404, 'not_found');
    const after = (await api(base, owner, 'GET', '/credentials')).json;
    t.same(after.map((c: { name: string }) => c.name), ['github'], 'only that one is gone');
    const reuse = await api(base, owner, 'POST', '/credentials', { name: 'ported', hostname: 'api.github.com:8443', cred_type: 'bearer', value: 'v2' });
    t.equal(reuse.status, 201, 'its hostname is free again');
  });
});

t.test('an organization holds at most 10,000 agents and 10,000 credentials: the next is 409 and the list stays quick', async (t) => {
  const full = await signup(base);
  const orgId = (await service.store.findUserByEmail(full.email))!.orgId;
  for (let i = 0; i < ORG_AGENTS_MAX; i++) {
    await service.store.createAgent({ orgId, name: `a${i}`, logOutputs: 'hash', keyHash: randomBytes(32).toString('hex'), apiKeyPrefix: 'agk_AbCdEfGh...' });
  }
  for (let i = 0; i < ORG_CREDENTIALS_MAX; i++) {
    await service.store.createCredential({ orgId, name: 'token', hostname: `h${i}.example.com`, credType: 'bearer', headerName: null, queryParam: null, sealedValue: 'sealed' });
  }
  const agent = await api(base, full, 'POST', '/agents', { name: 'one too many' });
  assertError(t, agent, 409, 'conflict');
  t.match(agent.json, { message: 'The organization has 10,000 agents, the most allowed; delete one to create another.', limit: 'agents_per_org' });
  const credential = await api(base, full, 'POST', '/credentials', { name: 'x', hostname: 'one-too-many.example.com', cred_type: 'bearer', value: 'v' });
  assertError(t, credential, 409, 'conflict');
  t.match(credential.json, { message: 'The organization has 10,000 credentials, the most allowed; delete one to create another.', limit: 'credentials_per_org' });
  for (const path of ['/agents', '/credentials']) {
    const started = performance.now();
    const list = await api(base, full, 'GET', path);
    t.equal(list.json.length, 10_000, `GET ${path}: all 10,000 in ${(performance.now() - started).toFixed(0)} ms`);
  }
  t.equal((await api(base, owner, 'POST', '/agents', { name: 'another org' })).status, 201, 'another organization is not held');
  const first = (await api(base, full, 'GET', '/agents')).json[0];
  t.equal((await api(base, full, 'DELETE', `/agents/${first.id}`)).status, 204);
  t.equal((await api(base, full, 'POST', '/agents', { name: 'in its place' })).status, 201, 'a deleted agent frees its place');
});

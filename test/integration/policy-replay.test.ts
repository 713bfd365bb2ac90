// Shadow rules, POST /policy/check with a candidate, and POST /policy/replay,
// through one all-in-one process and a real HTTPS upstream: the audit entries a
// shadow rule leaves, replay counts the test works out for itself, calls that
// another stage refused kept as they were, samples, the window, a property test
// that the proxy and replay decide alike, and a million rows replayed in bulk.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import fc from 'fast-check';
import t from 'tap';
import { api, createAgent, eventually, signup, startTestService } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';
import { auditRecord, insertRecords } from '../support/audit-records.js';
import { AUDIT_COLUMN_NAMES } from '../../shared/audit/audit-codec.js';

const upstream = await startUpstream();
const service = await startTestService({ AUDIT_BATCH_MS: '20' });
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

const owner = await signup(service.url);
const ownerOrg = (await service.store.findUserByEmail(owner.email))!.orgId;

async function agentWithPolicy(name: string, yaml: string) {
  const agent = await createAgent(service.url, owner, name, 'none');
  const set = await api(service.url, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: yaml });
  if (set.status !== 200) throw new Error(`policy: ${set.status} ${set.text}`);
  return agent;
}

async function call(key: string, method: string, path: string, host = upstream.authority): Promise<number> {
  const res = await fetch(`${service.url}/proxy/${key}/${host}${path}`, { method });
  await res.arrayBuffer();
  return res.status;
}

async function auditOf(agentId: string, count: number): Promise<any[]> {
  return eventually(async () => {
    const rows = (await api(service.url, owner, 'GET', `/audit?agent_id=${agentId}&limit=1000`)).json as any[];
    return rows.length >= count ? rows : undefined;
  }, 10_000);
}

t.test('a shadow rule never decides; the audit entry and the check report the first one that matches', async (t) => {
  const agent = await agentWithPolicy('shadow', `version: "1"
rules:
  - name: try-no-deletes
    tool: "*"
    action: DELETE
    decision: deny
    mode: shadow
  - name: try-allow-admin
    tool: "*"
    action: "*"
    path: /admin/**
    decision: allow
    mode: shadow
  - name: no-admin
    tool: "*"
    action: "*"
    path: /admin/**
    decision: deny
`);
  t.equal(await call(agent.api_key, 'DELETE', '/echo'), 200, 'the shadow deny did not decide');
  t.equal(await call(agent.api_key, 'GET', '/admin/x'), 403, 'the enforced rule decided; the shadow allow did not');
  t.equal(await call(agent.api_key, 'GET', '/echo'), 200);
  const rows = await auditOf(agent.id, 3);
  const by = (action: string, url: string) => rows.find((r) => r.action === action && r.tool_url.endsWith(url));
  t.strictSame([by('DELETE', '/echo').shadow_rule, by('DELETE', '/echo').shadow_decision], ['try-no-deletes', 'deny']);
  t.strictSame([by('GET', '/admin/x').shadow_rule, by('GET', '/admin/x').shadow_decision, by('GET', '/admin/x').rule_matched], ['try-allow-admin', 'allow', 'no-admin']);
  t.strictSame([by('GET', '/echo').shadow_rule, by('GET', '/echo').shadow_decision], [null, null], 'null when no shadow rule matches');

  const check = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: '127.0.0.1', action: 'DELETE', reasoning: '' });
  t.match(check.json, { decision: 'allow', rule_matched: 'default', shadow_rule: 'try-no-deletes', shadow_decision: 'deny' });
  const manual = await api(service.url, owner, 'POST', '/audit', { agent_id: agent.id, tool_name: 'x', action: 'GET', decision: 'allowed' });
  t.strictSame([manual.json.shadow_rule, manual.json.shadow_decision], [null, null], 'POST /audit entries carry both fields, null');
});

t.test('POST /policy/check evaluates a candidate rules_yaml instead of the stored policy, with a path', async (t) => {
  const agent = await agentWithPolicy('candidate', 'version: "1"\ndefault: deny\nrules: []\n');
  const candidate = `version: "1"
rules:
  - name: no-repo-deletes
    tool: api.github.com
    action: DELETE
    path: /repos/**
    decision: deny
`;
  const stored = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: 'api.github.com', action: 'DELETE', reasoning: '', path: '/repos/a/b' });
  t.equal(stored.json.decision, 'deny', 'the stored policy');
  t.equal(stored.json.rule_matched, 'default');
  const tried = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: 'api.github.com', action: 'DELETE', reasoning: '', path: '/repos//a/%62', rules_yaml: candidate });
  t.match(tried.json, { decision: 'deny', rule_matched: 'no-repo-deletes' }, 'the candidate, on the path as the proxy normalises it');
  const elsewhere = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: 'api.github.com', action: 'DELETE', reasoning: '', path: '/user', rules_yaml: candidate });
  t.match(elsewhere.json, { decision: 'allow', rule_matched: 'default' });
  const invalid = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: 'x', action: 'GET', reasoning: '', rules_yaml: 'version: "1"\nrules:\n  - tool: "*"\n    action: GET\n    decision: maybe\n' });
  t.equal(invalid.status, 400);
  t.equal(invalid.json.error, 'invalid_policy');
  t.match(invalid.json.message, /rule 1 \(line 5\): 'decision' must be allow, deny or approve/);
  const badMode = await api(service.url, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: 'x', action: 'GET', reasoning: '', rules_yaml: 'version: "1"\nrules:\n  - tool: "*"\n    action: GET\n    decision: deny\n    mode: dry-run\n' });
  t.match(badMode.json, { error: 'invalid_policy', message: /'mode' must be enforce or shadow, not 'dry-run'/ });
  const kept = await api(service.url, owner, 'GET', `/agents/${agent.id}/policy`);
  t.equal(kept.json.rules_yaml, 'version: "1"\ndefault: deny\nrules: []\n', 'a checked candidate is not stored');
});

t.test('replay: counts, per-tool table and samples the test works out itself; calls other stages refused are kept', async (t) => {
  const agent = await agentWithPolicy('replayed', `version: "1"
default: deny
rules:
  - name: read-echo
    tool: "*"
    action: GET
    decision: allow
  - name: delete-items
    tool: "*"
    action: DELETE
    path: /items/**
    decision: allow
limits:
  - name: limited
    tool: "*"
    path: /limited
    rate: 1/hour
`);
  const made: { method: string; path: string; host?: string; status: number }[] = [];
  const make = async (method: string, path: string, times: number, host?: string) => {
    for (let i = 0; i < times; i++) made.push({ method, path, host, status: await call(agent.api_key, method, path, host) });
  };
  await make('GET', '/echo', 5);
  await make('DELETE', '/items//1', 3); // normalised to /items/1
  await make('POST', '/echo', 4); // denied by default
  await make('GET', '/echo', 2, '127.0.0.2'); // allowed by the rules, refused by the SSRF guard
  await make('GET', '/limited', 3); // 1 passes, 2 refused by the limit
  t.strictSame(made.map((m) => m.status).slice(8), [403, 403, 403, 403, 403, 403, made[14]!.status, 429, 429], 'POSTs and SSRF refused, the limit after one call');
  t.not(made[14]!.status, 429, 'the first /limited call went through');
  const rows = await auditOf(agent.id, made.length);

  // The candidate: no deletes, POSTs to /echo allowed, everything else allowed by default.
  const candidate = `version: "1"
rules:
  - name: no-deletes
    tool: "*"
    action: DELETE
    decision: deny
  - name: post-echo
    tool: "*"
    action: POST
    path: /echo
    decision: allow
`;
  const replay = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: candidate });
  t.equal(replay.status, 200, replay.text.slice(0, 200));
  // Worked out by hand: the 3 allowed deletes would be denied, the 4 denied
  // POSTs allowed; the SSRF and limit refusals keep their decision.
  t.match(replay.json, { total: 17, unchanged: 10, allow_to_deny: 3, deny_to_allow: 4 });
  t.strictSame(replay.json.by_tool, [
    { tool_name: '127.0.0.1', action: 'GET', calls: 8, allow_to_deny: 0, deny_to_allow: 0 },
    { tool_name: '127.0.0.1', action: 'POST', calls: 4, allow_to_deny: 0, deny_to_allow: 4 },
    { tool_name: '127.0.0.1', action: 'DELETE', calls: 3, allow_to_deny: 3, deny_to_allow: 0 },
    { tool_name: '127.0.0.2', action: 'GET', calls: 2, allow_to_deny: 0, deny_to_allow: 0 },
  ]);
  const changedIds = rows.filter((r) => r.action === 'DELETE' || r.action === 'POST').sort((a, b) => (a.timestamp < b.timestamp ? 1 : a.timestamp > b.timestamp ? -1 : 0)).map((r) => r.id);
  t.strictSame(new Set(replay.json.samples.map((s: any) => s.audit_id)), new Set(changedIds), 'the samples are the changed calls');
  const timestamps = replay.json.samples.map((s: any) => s.timestamp);
  t.strictSame(timestamps, [...timestamps].sort().reverse(), 'newest first');
  const aDelete = replay.json.samples.find((s: any) => s.action === 'DELETE');
  t.strictSame(aDelete, { audit_id: aDelete.audit_id, timestamp: aDelete.timestamp, tool_name: '127.0.0.1', action: 'DELETE', path: '/items/1', decision: 'allowed', would_decision: 'deny', would_rule: 'no-deletes' });
  const aPost = replay.json.samples.find((s: any) => s.action === 'POST');
  t.match(aPost, { path: '/echo', decision: 'denied', would_decision: 'allow', would_rule: 'post-echo' });

  const same = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: (await api(service.url, owner, 'GET', `/agents/${agent.id}/policy`)).json.rules_yaml });
  t.match(same.json, { total: 17, unchanged: 17, allow_to_deny: 0, deny_to_allow: 0, samples: [] }, 'the stored policy replays unchanged');

  const later = new Date(Date.now() + 60_000).toISOString();
  const empty = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: candidate, since: later, until: new Date(Date.now() + 120_000).toISOString() });
  t.match(empty.json, { total: 0, unchanged: 0, by_tool: [], samples: [] }, 'a window after now: nothing');
  for (const window of [{ since: later }, { since: later, until: later }]) {
    const inverted = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: candidate, ...window });
    t.match(inverted, { status: 400, json: { error: 'invalid_request', field: 'since' } }, `${JSON.stringify(window)}: since must be before until (the default until is now)`);
  }
  const early = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: candidate, until: '0000-01-03T00:00:00Z' });
  t.match(early, { status: 200, json: { total: 0 } }, `an until early in year 0000: the default since (7 days before) stops at 0000-01-01, not in year -1 (a 500): ${early.text}`);
  const bad = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: candidate, since: 'last week' });
  t.match(bad, { status: 400, json: { error: 'invalid_request', field: 'since' } });
  const invalid = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: 'rules: []' });
  t.match(invalid, { status: 400, json: { error: 'invalid_policy' } });
  const other = await signup(service.url);
  const foreign = await api(service.url, other, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: candidate });
  t.equal(foreign.status, 404, "another org's agent is not found");
});

t.test('the proxy and replay decide alike: random calls replayed against their own policy change nothing (property)', async (t) => {
  const methods = ['GET', 'POST', 'DELETE', 'PUT'];
  const segments = ['a', 'b', 'items', 'x%2Fy', '%61', '', 'repos'];
  const globs = ['/a/**', '/items/*', '/repos/*/b', '/x/y', '/**', '/a'];
  let run = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.record({ action: fc.constantFrom(...methods, '*'), path: fc.option(fc.constantFrom(...globs), { nil: undefined }), decision: fc.constantFrom('allow', 'deny') }), { maxLength: 5 }),
      fc.constantFrom('allow', 'deny'),
      fc.array(fc.record({ method: fc.constantFrom(...methods), path: fc.array(fc.constantFrom(...segments), { minLength: 1, maxLength: 3 }) }), { minLength: 1, maxLength: 12 }),
      async (rules, fallback, calls) => {
        const yaml = `version: "1"\ndefault: ${fallback}\nrules:\n${rules.map((r) => `  - tool: "*"\n    action: "${r.action}"\n${r.path ? `    path: "${r.path}"\n` : ''}    decision: ${r.decision}\n`).join('')}${rules.length === 0 ? '  []\n' : ''}`.replace('rules:\n  []', 'rules: []');
        const agent = await agentWithPolicy(`prop-${run++}`, yaml);
        for (const c of calls) await call(agent.api_key, c.method, `/${c.path.join('/')}`);
        await auditOf(agent.id, calls.length);
        const replay = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: yaml });
        return replay.json.total === calls.length && replay.json.allow_to_deny === 0 && replay.json.deny_to_allow === 0;
      },
    ),
    { numRuns: 8 },
  );
  t.pass('no call decided differently');
});

t.test('rows written by an earlier version (no shadow, path or decided columns) are stored with defaults and replay from their URL', async (t) => {
  const agent = await createAgent(service.url, owner, 'old-rows', 'none');
  const at = Date.now() - 60_000;
  const old = (overrides: Parameters<typeof auditRecord>[1]) => {
    const line = service.auditStore.encode(auditRecord(ownerOrg, { agentId: agent.id, agentName: 'old-rows', timestamp: new Date(at).toISOString(), ...overrides }));
    // The line as the version before the columns after mcp_session_id wrote it (spooled or journalled then, replayed now).
    return `${line.slice(0, -1).split('\t').slice(0, AUDIT_COLUMN_NAMES.indexOf('mcp_session_id') + 1).join('\t')}\n`;
  };
  await service.auditStore.insertEncoded(
    old({ action: 'DELETE', toolName: 'api.example.com', toolUrl: 'https://api.example.com/items//7?x=1', ruleMatched: 'default', decision: 'allowed' }) +
      old({ action: 'GET', toolName: 'api.example.com', toolUrl: 'https://api.example.com/x', ruleMatched: 'target_forbidden', decision: 'denied' }) +
      old({ action: 'GET', toolName: 'api.example.com', toolUrl: 'https://api.example.com/y', ruleMatched: 'limit:l', decision: 'denied' }) +
      // Allowed by its rule, then refused 503 (a store down while loading the credential): not the policy's decision.
      old({ action: 'POST', toolName: 'api.example.com', toolUrl: 'https://api.example.com/z', ruleMatched: 'writes', decision: 'denied', statusCode: 503 }) +
      // A bare host: the proxy matches the path '/'.
      old({ action: 'PUT', toolName: 'api.example.com', toolUrl: 'https://api.example.com', ruleMatched: 'default', decision: 'allowed' }),
    'old-rows',
  );
  const rows = await auditOf(agent.id, 5);
  t.ok(rows.every((r) => r.shadow_rule === null && r.shadow_decision === null && r.mcp_method === null && r.mcp_tool === null), 'the new fields read as null');
  const replay = await api(service.url, owner, 'POST', '/policy/replay', {
    agent_id: agent.id,
    rules_yaml: 'version: "1"\nrules:\n  - name: no-item-deletes\n    tool: "*"\n    action: DELETE\n    path: /items/*\n    decision: deny\n  - name: no-gets\n    tool: "*"\n    action: GET\n    decision: deny\n  - name: no-root-puts\n    tool: "*"\n    action: PUT\n    path: /\n    decision: deny\n  - name: posts\n    tool: "*"\n    action: POST\n    decision: allow\n',
  });
  t.match(replay.json, { total: 5, allow_to_deny: 2, deny_to_allow: 0, unchanged: 3 }, 'the SSRF, limit and 503 refusals are recognised and kept');
  const samples = [...replay.json.samples].sort((a: any, b: any) => a.action.localeCompare(b.action));
  t.match(samples, [{ action: 'DELETE', path: '/items/7', would_rule: 'no-item-deletes' }, { action: 'PUT', path: '/', would_rule: 'no-root-puts' }], 'the path taken from the URL, normalised as the proxy does (a bare host is /)');
});

/** Replays `rules` over one allowed GET row as an older build recorded it, of an agent of its own. */
async function replayOldRow(name: string, row: { toolName: string; toolUrl: string; policyPath: string }, rules: string) {
  const agent = await createAgent(service.url, owner, name, 'none');
  const line = service.auditStore.encode(auditRecord(ownerOrg, { agentId: agent.id, agentName: name, action: 'GET', ruleMatched: 'default', decision: 'allowed', policyDecided: true, ...row }));
  await service.auditStore.insertEncoded(line, name);
  await auditOf(agent.id, 1);
  return (await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: `version: "1"\nrules:\n  - ${rules}\n` })).json;
}

t.test('a path recorded with raw characters (before they were escaped) replays as the proxy now reads it', async (t) => {
  const replayed = await replayOldRow('raw-path', { toolName: 'wiki.example', toolUrl: 'https://wiki.example/wiki/Zürich/edit', policyPath: '/wiki/Zürich/edit' },
    '{name: no-zurich-edits, tool: "*", action: GET, path: "/wiki/Zürich/*", decision: deny}');
  t.match(replayed, { total: 1, allow_to_deny: 1 }, 'the rule (escaped as the proxy escapes the path) meets the old row');
});

t.test('a tool recorded as an IPv4-mapped IPv6 address (before such targets were read as IPv4) replays as the proxy now reads it', async (t) => {
  const replayed = await replayOldRow('mapped-tool', { toolName: '::ffff:7f00:1', toolUrl: 'https://[::ffff:7f00:1]:8443/x', policyPath: '/x' },
    '{name: not-here, tool: "127.0.0.1", action: GET, decision: deny}');
  t.match(replayed, { total: 1, allow_to_deny: 1 }, 'a rule for 127.0.0.1 meets the old row');
});

t.test('a million audit rows replay in under 10 s', async (t) => {
  const agent = await createAgent(service.url, owner, 'million', 'none');
  const ROWS = 1_000_000;
  const CHUNK = 100_000;
  const base = Date.now() - 3 * 86_400_000;
  const tools = Array.from({ length: 20 }, (_, i) => `tool-${i}.example.com`);
  const actions = ['GET', 'POST', 'DELETE', 'PUT'];
  let expectedDeletes = 0;
  for (let start = 0; start < ROWS; start += CHUNK) {
    let body = '';
    for (let i = start; i < start + CHUNK; i++) {
      const action = actions[i % 4]!;
      if (action === 'DELETE') expectedDeletes++;
      body += service.auditStore.encode(auditRecord(ownerOrg, {
        agentId: agent.id,
        agentName: 'million',
        timestamp: new Date(base + i * 200).toISOString(),
        toolName: tools[i % 20]!,
        action,
        toolUrl: `https://${tools[i % 20]}/items/${i % 500}`,
        policyPath: `/items/${i % 500}`,
        policyDecided: true,
        ruleMatched: 'default',
      }));
    }
    await service.auditStore.insertEncoded(body, `million-${start}`);
  }
  const started = performance.now();
  const replay = await api(service.url, owner, 'POST', '/policy/replay', {
    agent_id: agent.id,
    rules_yaml: 'version: "1"\nrules:\n  - name: no-deletes\n    tool: "*"\n    action: DELETE\n    decision: deny\n',
  });
  const seconds = (performance.now() - started) / 1000;
  t.equal(replay.status, 200);
  t.match(replay.json, { total: ROWS, allow_to_deny: expectedDeletes, deny_to_allow: 0 });
  t.equal(replay.json.samples.length, 100);
  t.ok(seconds < 10, `replayed ${ROWS.toLocaleString('en-US')} rows in ${seconds.toFixed(2)} s`);
});

t.test('a window of more groups than one query reads (paths with ids: a group a call) replays in parts, with the same counts', async (t) => {
  const agent = await createAgent(service.url, owner, 'ids', 'none');
  const ROWS = 250_000; // ~54 MB of groups: ~8 parts of up to 8 MiB
  const CHUNK = 50_000;
  const base = Date.now() - 2 * 86_400_000;
  let expectedDeletes = 0;
  for (let start = 0; start < ROWS; start += CHUNK) {
    let body = '';
    for (let i = start; i < start + CHUNK; i++) {
      const action = i % 4 === 0 ? 'DELETE' : 'GET';
      if (action === 'DELETE') expectedDeletes++;
      body += service.auditStore.encode(auditRecord(ownerOrg, {
        agentId: agent.id,
        agentName: 'ids',
        timestamp: new Date(base + i * 100).toISOString(),
        toolName: 'api.example.com',
        action,
        toolUrl: `https://api.example.com/items/${i}`,
        policyPath: `/items/${i}`,
        policyDecided: true,
        ruleMatched: 'default',
      }));
    }
    await service.auditStore.insertEncoded(body, `ids-${start}`);
  }
  const replay = await api(service.url, owner, 'POST', '/policy/replay', {
    agent_id: agent.id,
    rules_yaml: 'version: "1"\nrules:\n  - name: no-deletes\n    tool: "*"\n    action: DELETE\n    decision: deny\n  - name: rest\n    tool: "*"\n    action: "*"\n    decision: allow\n',
  });
  t.equal(replay.status, 200, replay.text.slice(0, 200));
  t.match(replay.json, { total: ROWS, allow_to_deny: expectedDeletes, deny_to_allow: 0, unchanged: ROWS - expectedDeletes });
  t.strictSame(replay.json.by_tool.map((r: any) => [r.action, r.calls, r.allow_to_deny]).sort(), [['DELETE', expectedDeletes, expectedDeletes], ['GET', ROWS - expectedDeletes, 0]]);
  t.equal(replay.json.samples.length, 100, 'samples of the changed groups, named by their keys');
  t.ok(replay.json.samples.every((s: any) => s.action === 'DELETE' && s.would_decision === 'deny' && /^\/items\/\d+$/.test(s.path)));
  // 62,500 changed groups of one call each, more than a sample query names: the samples are still the newest changed calls.
  t.strictSame(replay.json.samples.map((s: any) => s.path), Array.from({ length: 100 }, (_, k) => `/items/${ROWS - 4 - 4 * k}`), 'the 100 newest DELETEs, newest first');
  // What the service holds at once: a part, never the window's every group.
  const parts: number[] = [];
  await service.auditStore.replayGroups(ownerOrg, agent.id, new Date(base - 1000), new Date(), (groups) => {
    parts.push(groups.length);
  });
  t.ok(parts.length >= 5 && Math.max(...parts) <= 40_000, `read in ${parts.length} parts of ${parts.join(', ')} groups`);
  t.equal(parts.reduce((a, b) => a + b, 0), ROWS, 'every group once');
});

t.test('groups of long paths are read in parts of a bounded size too: one parse of a part holds the event loop tens of ms, not a second', async (t) => {
  const agent = await createAgent(service.url, owner, 'long-paths', 'none');
  const ROWS = 3_000;
  const long = (i: number) => `/items/${i}/${'x'.repeat(8_000)}`;
  const base = Date.now() - 86_400_000;
  await insertRecords(service.auditStore, ROWS, ROWS, `long-paths-${agent.id}`, (i) => auditRecord(ownerOrg, {
    agentId: agent.id, agentName: 'long-paths', timestamp: new Date(base + i * 100).toISOString(), toolName: 'api.example.com', action: 'GET',
    toolUrl: `https://api.example.com${long(i)}`, policyPath: long(i), policyDecided: true, ruleMatched: 'default',
  }));
  // 3,000 groups of 8 KiB were one part of 24 MB (30,000 of them held the loop 1.1 s in JSON.parse): now parts of at most 8 MiB.
  const parts: number[] = [];
  await service.auditStore.replayGroups(ownerOrg, agent.id, new Date(base - 1000), new Date(), (groups) => {
    parts.push(groups.reduce((sum, g) => sum + g.path.length, 0));
  });
  t.ok(parts.length >= 3 && Math.max(...parts) <= 8 * 1024 * 1024, `read in ${parts.length} parts of ${parts.map((b) => `${(b / 1e6).toFixed(1)} MB`).join(', ')} of paths`);
  const replay = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: 'version: "1"\nrules:\n  - {name: no-items, tool: "*", action: GET, path: "/items/1*/*", decision: deny}\n' });
  t.equal(replay.status, 200, replay.text.slice(0, 200));
  const denied = Array.from({ length: ROWS }, (_, i) => i).filter((i) => String(i).startsWith('1')).length;
  t.match(replay.json, { total: ROWS, allow_to_deny: denied, deny_to_allow: 0 }, 'and they replay whole');
});

t.test('changed groups with MCP names of a megabyte (recorded before their bound) are matched to their samples by key, not held', async (t) => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const agent = await createAgent(service.url, owner, 'long-mcp-names', 'none');
  const ROWS = 150;
  const base = Date.now() - 86_400_000;
  await insertRecords(service.auditStore, ROWS, 10, `long-mcp-names-${agent.id}`, (i) => auditRecord(ownerOrg, {
    agentId: agent.id, agentName: 'long-mcp-names', timestamp: new Date(base + i * 100).toISOString(), toolName: 'api.example.com', action: 'POST',
    toolUrl: 'https://api.example.com/mcp', policyPath: '/mcp', policyDecided: true, ruleMatched: 'default', mcpMethod: 'tools/call', mcpTool: `x${i}_${'a'.repeat(1_000_000)}`,
  }));
  gc();
  const before = process.memoryUsage().heapUsed;
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().heapUsed);
  }, 2);
  const replay = await api(service.url, owner, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: 'version: "1"\nrules:\n  - {name: no-tools, tool: "*", action: POST, mcp_method: "tools/*", decision: deny}\n' });
  clearInterval(sampler);
  t.equal(replay.status, 200, replay.text.slice(0, 200));
  t.match(replay.json, { total: ROWS, allow_to_deny: ROWS });
  t.equal(replay.json.samples.length, 100);
  t.ok(replay.json.samples.every((s: any) => s.would_rule === 'uninspectable_body' && s.path === '/mcp'), 'each sample named by its group\'s key');
  // Before, the changed groups held their names and the sample query read 100 of them: the heap grew 320–510 MB.
  const grown = (peak - before) / 1e6;
  t.ok(grown < 150, `the heap grew at most ${grown.toFixed(0)} MB during the replay of ${ROWS} MB of names`);
});

/** A new agent (of `account`'s org) with `rows` allowed GETs of a day ago, each its own path (a group a call), written to the store in one insert. */
async function seedPathGroups(name: string, rows: number, account = { session: owner, orgId: ownerOrg }) {
  const agent = await createAgent(service.url, account.session, name, 'none');
  const base = Date.now() - 86_400_000;
  let body = '';
  for (let i = 0; i < rows; i++) {
    body += service.auditStore.encode(auditRecord(account.orgId, {
      agentId: agent.id, agentName: name, timestamp: new Date(base + i * 100).toISOString(), toolName: 'api.example.com', action: 'GET',
      toolUrl: `https://api.example.com/items/${i}`, policyPath: `/items/${i}`, policyDecided: true, ruleMatched: 'default',
    }));
  }
  await service.auditStore.insertEncoded(body, `${name}-${agent.id}`);
  return agent;
}

t.test('a replay deciding many groups against a large candidate gives the event loop its turns (all-in-one, the proxy shares it)', async (t) => {
  const ROWS = 20_000;
  const agent = await seedPathGroups('many-rules', ROWS);
  // 800 rules that match none of the paths, each tried on each of the 20,000 groups (a group a path):
  // ~2.7 s of deciding, which held the loop whole. Parsing the YAML (~0.25 s, the yaml library's) runs in a worker.
  const rules = Array.from({ length: 800 }, (_, i) => `  - {name: r${i}, tool: "*", action: GET, path: "/x${i}*", decision: deny}`).join('\n');
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const started = performance.now();
  const replay = await api(service.url, owner, 'POST', '/policy/replay', {
    agent_id: agent.id,
    rules_yaml: `version: "1"\nrules:\n${rules}\n  - {name: rest, tool: "*", action: "*", decision: allow}\n`,
  });
  const seconds = (performance.now() - started) / 1000;
  delay.disable();
  t.equal(replay.status, 200, replay.text.slice(0, 200));
  t.match(replay.json, { total: ROWS, unchanged: ROWS, allow_to_deny: 0, deny_to_allow: 0 });
  const longest = delay.max / 1e6;
  t.ok(longest < 1000, `the longest the event loop waited during the ${seconds.toFixed(2)} s replay: ${longest.toFixed(0)} ms`);
});

/** A candidate of 400 rules that match none of the seeded paths: ~0.4 s to replay 10,000 groups. */
const ROWS_AT_ONCE = 10_000;
const CANDIDATE_AT_ONCE = `version: "1"\nrules:\n${Array.from({ length: 400 }, (_, i) => `  - {name: r${i}, tool: "*", action: GET, path: "/x${i}*", decision: deny}`).join('\n')}\n  - {name: rest, tool: "*", action: "*", decision: allow}\n`;

/** A new organization with an agent of ROWS_AT_ONCE groups, and a replay of CANDIDATE_AT_ONCE over them. */
async function orgToReplay(name: string) {
  const session = await signup(service.url);
  const orgId = (await service.store.findUserByEmail(session.email))!.orgId;
  const agent = await seedPathGroups(name, ROWS_AT_ONCE, { session, orgId });
  const body = JSON.stringify({ agent_id: agent.id, rules_yaml: CANDIDATE_AT_ONCE });
  return Object.assign(() => api(service.url, session, 'POST', '/policy/replay', { agent_id: agent.id, rules_yaml: CANDIDATE_AT_ONCE }), {
    /** The same replay by a client that may leave before its answer. */
    leaving: (signal: AbortSignal) => fetch(`${service.url}/policy/replay`, { method: 'POST', headers: { ...session.auth, 'content-type': 'application/json' }, body, signal }),
  });
}

t.test('replays asked at once run one at a time: the event loop waits one slice between turns, not one a replay', async (t) => {
  // Two of each of three organizations: each within its share of the places to wait (JOBS_WAITING_PER_ORG).
  const orgs = await Promise.all(['at-once-a', 'at-once-b', 'at-once-c'].map(orgToReplay));
  const REPLAYS = 6;
  const delay = monitorEventLoopDelay({ resolution: 2 });
  delay.enable();
  const started = performance.now();
  const finished: number[] = [];
  const replays = await Promise.all(Array.from({ length: REPLAYS }, (_, i) =>
    orgs[i % orgs.length]!().then((res) => {
      finished.push(performance.now() - started);
      return res;
    })));
  delay.disable();
  for (const replay of replays) t.match(replay.json, { total: ROWS_AT_ONCE, unchanged: ROWS_AT_ONCE }, replay.text.slice(0, 200));
  // Six at once gave the loop a turn every six slices of 10 ms (a median wait of ~60 ms); one at a time, every slice (~10 ms).
  const median = delay.percentile(50) / 1e6;
  t.ok(median < 30, `the event loop's median wait while ${REPLAYS} replays ran: ${median.toFixed(1)} ms (the longest ${(delay.max / 1e6).toFixed(0)} ms; answered at ${finished.map((ms) => ms.toFixed(0)).join(', ')} ms)`);
});

t.test('an organization past its share of waiting replays gets 429 (limit jobs), while another organization gets in', async (t) => {
  const [greedy, other] = await Promise.all([orgToReplay('greedy'), orgToReplay('other')]);
  // Six of one organization at once: one runs and two wait; the others, asked well
  // within the ~0.4 s the first takes, are refused. The first two always fit.
  const started = performance.now();
  const asked = Array.from({ length: 6 }, () => greedy().then((res) => ({ res, ms: performance.now() - started })));
  const theirs = other();
  const answers = await Promise.all(asked);
  const when = answers.map((a) => `${a.res.status} at ${a.ms.toFixed(0)} ms`).join(', ');
  const done = answers.filter((a) => a.res.status === 200);
  const refused = answers.filter((a) => a.res.status === 429);
  t.equal(done.length + refused.length, 6, `each answered 200 or 429 (${when})`);
  t.ok(done.length >= 2 && done.length <= 3, `2 or 3 replayed: the one running and the two waiting (${when})`);
  for (const a of done) t.match(a.res.json, { total: ROWS_AT_ONCE, unchanged: ROWS_AT_ONCE });
  for (const a of refused) {
    t.match(a.res.json, { error: 'rate_limited', limit: 'jobs', retry_after: 5, message: /^2 policy replays of this organization are waiting to run/ }, a.res.text);
    t.equal(a.res.headers.get('retry-after'), '5', 'with Retry-After: 5');
  }
  const answer = await theirs;
  t.equal(answer.status, 200, `another organization's replay, asked meanwhile, is taken: ${answer.text.slice(0, 200)}`);
  t.match(answer.json, { total: ROWS_AT_ONCE, unchanged: ROWS_AT_ONCE });
  t.equal((await greedy()).status, 200, 'once its replays have run, the organization is taken again');
});

t.test('a waiting replay whose client left gives its place up: the organization may ask again at once', async (t) => {
  const replay = await orgToReplay('leaves');
  const running = replay(); // ~0.4 s
  await new Promise((r) => setTimeout(r, 50));
  const client = new AbortController();
  const abandoned = replay.leaving(client.signal).catch((err: Error) => err);
  await new Promise((r) => setTimeout(r, 50));
  client.abort();
  t.equal(((await abandoned) as Error).name, 'AbortError', 'the client gave up while its replay waited');
  await new Promise((r) => setTimeout(r, 50));
  // Two may wait: without the abandoned one's place given up, the second of these was 429.
  const again = await Promise.all([replay(), replay()]);
  t.strictSame(again.map((res) => res.status), [200, 200], again.map((res) => res.text.slice(0, 120)).join(' | '));
  t.equal((await running).status, 200);
});

// POST /policy/check and the proxy normalise a call's tool and path with one
// function (shared/target.ts), so the same call gets the same decision from both
// (CONTRACT.md "Clarifications"): each spelling below goes through both.
import t from 'tap';
import { api, createAgent, signup, startTestService } from '../support/service.js';
import { assertError } from '../support/checks.js';
import { rawRequest } from '../support/raw-http.js';
import { startUpstream } from '../support/upstream.js';

const upstream = await startUpstream();
const service = await startTestService();
const base = service.url;
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

const owner = await signup(base);
const agent = await createAgent(base, owner, 'parity');
const policy = `version: "1"
rules:
  - name: no-admin
    tool: "127.0.0.1"
    action: "*"
    path: /admin/**
    decision: deny
  - name: no-deletes
    tool: "127.0.0.1"
    action: DELETE
    decision: deny
  # Written as people write them: the shorthand host, a raw space, an escaped slash.
  - name: no-report
    tool: "127.1"
    action: "*"
    path: /docs/my report.pdf
    decision: deny
  - name: no-project
    tool: "127.0.0.1"
    action: "*"
    path: /projects/acme%2fapp/**
    decision: deny
`;
t.equal((await api(base, owner, 'POST', `/agents/${agent.id}/policy`, { rules_yaml: policy })).status, 200);

const port = upstream.port;
// Spellings of one host (case, IPv4 shorthand, hex, default-less port) and of paths.
const hosts = [`127.0.0.1:${port}`, `127.1:${port}`, `0x7f.0.0.1:${port}`, `0177.0.0.1:${port}`];
const paths = ['/admin/users', '//admin/users', '/%61dmin/users', '/admin%2Fusers', '/ADMIN/users', '/echo', '/echo?x=/admin/1', '/x/admin',
  '/docs/my report.pdf', '/docs/my%20report.pdf', '/projects/acme%2Fapp/issues', '/projects/acme/app', '/projects/acme%2fapp'];
const methods = ['GET', 'DELETE'];

t.test('the check API and the proxy decide every spelling alike', async (t) => {
  for (const host of hosts) {
    for (const path of paths) {
      for (const method of methods) {
        const label = `${method} ${host}${path}`;
        const check = await api(base, owner, 'POST', '/policy/check', { agent_id: agent.id, tool: host, action: method, reasoning: '', path });
        t.equal(check.status, 200, `check ${label}`);
        const proxied = await fetch(`${base}/proxy/${agent.api_key}/${host}${path}`, { method });
        await proxied.arrayBuffer();
        const proxyDenied = proxied.status === 403;
        t.equal(check.json.decision, proxyDenied ? 'deny' : 'allow', `${label}: check says ${check.json.decision}, proxy answered ${proxied.status}`);
        if (/report|project/.test(path)) t.equal(check.json.decision, 'deny', `${label}: the rule written as people write it meets the call`);
      }
    }
  }
});

t.test('what the proxy refuses as invalid_target, the check refuses naming the field', async (t) => {
  const check = (tool: string, path?: string) =>
    api(base, owner, 'POST', '/policy/check', { agent_id: agent.id, tool, action: 'GET', reasoning: '', ...(path !== undefined ? { path } : {}) });
  for (const tool of ['bad host', 'user@host', 'host:99999', 'a/b']) {
    assertError(t, await check(tool), 400, 'invalid_request', 'tool');
    const proxied = await fetch(`${base}/proxy/${agent.api_key}/${encodeURI(tool)}/x`);
    t.not(proxied.status, 200, `the proxy does not forward to ${tool}`);
  }
  for (const path of ['/a/../admin', '/a/%2e%2e/admin', '/./x', '/admin#x', '/a\\..\\admin', '/a%5cb']) {
    assertError(t, await check(`127.0.0.1:${port}`, path), 400, 'invalid_request', 'path');
    // Raw: fetch would resolve the dot segments before sending.
    const proxied = await rawRequest(service.port, `GET /proxy/${agent.api_key}/127.0.0.1:${port}${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, 300);
    t.equal(proxied.status, 400, `the proxy refuses ${path}`);
  }
});

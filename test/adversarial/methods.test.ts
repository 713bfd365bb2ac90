// Methods outside the seven the proxy forwards. TRACE and CONNECT (origin-form)
// reach the handler and are answered 405. A method the HTTP parser of our uWS
// build does not know (PROPFIND, MKCOL, a made-up one, a lowercase one) never
// reaches any handler: uWS closes the connection without a byte. That close is
// the answer (docs/api.md); this pins it, and that nothing is forwarded or audited.
import t from 'tap';
import { auditRows } from '../support/checks.js';
import { rawRequest } from '../support/raw-http.js';
import { api, createAgent, signup, startTestService } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';

const upstream = await startUpstream();
const service = await startTestService({ AUDIT_BATCH_MS: '20' });
t.teardown(async () => {
  await service.close();
  await upstream.close();
});

t.test('an unknown method gets its connection closed with no answer, within a second; nothing forwarded or audited', async (t) => {
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'methods');
  const seenBefore = upstream.seen.length;
  const auditedBefore = service.pipeline!.audited;
  for (const method of ['PROPFIND', 'MKCOL', 'FOO', 'get', 'Post']) {
    for (const body of ['', 'Content-Length: 5\r\n\r\nhello']) {
      const started = performance.now();
      const res = await rawRequest(service.port, `${method} /proxy/${agent.api_key}/${upstream.authority}/echo HTTP/1.1\r\nHost: x\r\n${body === '' ? '\r\n' : body}`, 3000);
      const ms = performance.now() - started;
      const what = `${method}${body === '' ? '' : ' with a body'}`;
      t.equal(res.text, '', `${what}: no byte answered`);
      t.ok(res.closed, `${what}: the connection is closed`);
      t.ok(ms < 1000, `${what}: closed after ${ms.toFixed(0)} ms, not at an idle timeout`);
    }
  }
  // Admin paths go through the same parser.
  const admin = await rawRequest(service.port, `PROPFIND /agents HTTP/1.1\r\nHost: x\r\n\r\n`, 3000);
  t.ok(admin.text === '' && admin.closed, 'an admin path: closed unanswered too');
  await new Promise((r) => setTimeout(r, 100)); // past AUDIT_BATCH_MS
  t.equal(upstream.seen.length, seenBefore, 'nothing reached the upstream');
  t.equal(service.pipeline!.audited, auditedBefore, 'nothing was audited: no handler saw a call');
  const rows = await api(service.url, owner, 'GET', `/audit?agent_id=${agent.id}&limit=1`);
  t.equal(rows.headers.get('x-total-count'), '0', 'and the audit log holds no row for the agent');
});

t.test('TRACE and CONNECT to a proxy path are 405 with Allow, and audited as denied', async (t) => {
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'trace');
  const seenBefore = upstream.seen.length;
  for (const method of ['TRACE', 'CONNECT']) {
    const res = await rawRequest(service.port, `${method} /proxy/${agent.api_key}/${upstream.authority}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`, 500);
    t.equal(res.status, 405, method);
    t.match(res.text, /allow: GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS/i);
  }
  t.equal(upstream.seen.length, seenBefore, 'nothing reached the upstream');
  const rows = await auditRows(service.url, owner, agent.id, 2);
  t.strictSame(rows.map((r) => [r.action, r.status_code, r.decision]).sort(), [['CONNECT', 405, 'denied'], ['TRACE', 405, 'denied']]);
});

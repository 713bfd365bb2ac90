// The endpoint-event rewrite of the older MCP transport (proxy/sse-endpoint.ts):
// only that event's reference changes, every other byte passes untouched.
import t from 'tap';
import { referenceRoot } from '../../proxy/response-urls.js';
import { SseEndpointRewriter } from '../../proxy/sse-endpoint.js';

const PREFIX = '/proxy/agk_KEY/api.example.com:8443';
/** The stream's upstream URL, and its URL at the guard. */
const BASE = 'https://api.example.com:8443/mcp/sse';
const GUARD_URL = `http://guard.example${PREFIX}/mcp/sse`;
// The absolute root, as for a request path that cannot be counted: the tests below read the prefix in the output.
const run = (chunks: string[], root = `${PREFIX}/`) => {
  const r = new SseEndpointRewriter(BASE, root);
  return chunks.map((c) => r.feed(Buffer.from(c, 'latin1')).toString('latin1')).join('') + r.flush().toString('latin1');
};

t.test('the endpoint event, whole or split across chunks, gets the prefix', async (t) => {
  const stream = 'event: endpoint\ndata: /messages?sessionId=abc\n\ndata: {"jsonrpc":"2.0"}\n\n';
  const want = `event: endpoint\ndata: ${PREFIX}/messages?sessionId=abc\n\ndata: {"jsonrpc":"2.0"}\n\n`;
  t.equal(run([stream]), want);
  t.equal(run(['event: endp', 'oint\r\ndata:/messages?sessionId=abc\r\n', '\r\n', 'data: x\r\n\r\n']), `event: endpoint\r\ndata: ${PREFIX}/messages?sessionId=abc\r\n\r\ndata: x\r\n\r\n`);
});

t.test('everything else passes untouched', async (t) => {
  for (const stream of [
    'data: /not-an-endpoint\n\nevent: endpoint\ndata: /late\n\n', // the first event is another kind: nothing is rewritten
    'event: endpoint\ndata: https://elsewhere.example/messages\n\n', // an absolute URL (the client refuses another origin itself)
    ': comment\n\n',
    `data: ${'x'.repeat(5000)}`, // no event end within 4 KiB: given up, sent as is
    'partial without an end',
    'héllo wörld in latin1 bytes \u00ff\n\n',
  ]) {
    t.equal(run([stream]), stream, JSON.stringify(stream.slice(0, 40)));
  }
});

t.test('dot segments in the endpoint path are resolved before the prefix: the client cannot climb out of its target', async (t) => {
  // Against the upstream itself, /../evil.example/m is /evil.example/m on the same host.
  for (const [data, path] of <Array<[string, string]>>[
    ['/../evil.example/m?s=1', '/evil.example/m?s=1'],
    ['/%2e%2e/evil.example/m', '/evil.example/m'],
    ['/a/./b/../c?x=1', '/a/c?x=1'],
    // WHATWG URL reads '\\' as '/', drops tabs, and takes '.%2e' for '..': spellings the dot-segment regex missed.
    ['/..\\evil.example/m', '/evil.example/m'],
    ['/.%2e\\evil.example/x', '/evil.example/x'],
    ['/.\t./evil.example/m', '/evil.example/m'],
    ['/\\evil.example/m', '/'], // another origin to a client (//evil.example/m): nothing of it kept
    ['//evil.example/m', '/'], // a network-path reference likewise
    // Relative to the stream's URL (/mcp/sse upstream), as the client resolves it:
    ['messages?s=1', '/mcp/messages?s=1'],
    ['../../evil.example/m', '/evil.example/m'],
    ['../../../../api.github.com/user', '/api.github.com/user'],
  ]) {
    const out = run([`event: endpoint\ndata: ${data}\n\n`]);
    t.equal(out, `event: endpoint\ndata: ${PREFIX}${path}\n\n`, data);
    const resolved = new URL(/data: (.*)/.exec(out)![1]!, GUARD_URL);
    t.ok(resolved.pathname.startsWith(`${PREFIX}/`), `${data}: stays under the target (${resolved.pathname})`);
  }
});

t.test('an injected credential in the endpoint event (built from the request URL) is redacted, as in a Location', async (t) => {
  const r = new SseEndpointRewriter(BASE, `${PREFIX}/`, [Buffer.from('sk_live_123'), Buffer.from('sk%5Flive%5F123')]);
  const out = r.feed(Buffer.from('event: endpoint\ndata: /messages?sessionId=1&api_key=sk_live_123\n\ndata: sk_live_123 in a later event\n\n', 'latin1')).toString('latin1');
  t.equal(out, `event: endpoint\ndata: ${PREFIX}/messages?sessionId=1&api_key=[REDACTED]\n\ndata: sk_live_123 in a later event\n\n`, 'the endpoint event only: later events pass untouched');
});

t.test('written relative to the stream\'s URL at the guard, the endpoint carries no key and lands where the absolute form does', async (t) => {
  const root = referenceRoot(new URL(GUARD_URL).pathname, PREFIX);
  t.equal(root, '../', 'one directory (mcp/) below the prefix');
  for (const data of ['/messages?sessionId=abc', 'messages?x=1', '../../../evil.example/m', '//evil.example/m']) {
    const relative = /data: (.*)/.exec(run([`event: endpoint\ndata: ${data}\n\n`], root))![1]!;
    const absolute = /data: (.*)/.exec(run([`event: endpoint\ndata: ${data}\n\n`]))![1]!;
    t.notMatch(relative, /agk_/, `${data}: written ${relative}`);
    t.equal(new URL(relative, GUARD_URL).href, new URL(absolute, GUARD_URL).href, `${data}: the same URL`);
  }
});

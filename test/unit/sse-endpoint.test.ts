// The endpoint-event rewrite of the older MCP transport (proxy/sse-endpoint.ts):
// every `endpoint` event's reference is rebased under the tool's root, read as
// an event-stream client reads the stream; every other byte passes untouched.
import t, { type Test } from 'tap';
import { MAX_EVENT_BYTES, SseEndpointRewriter } from '../../proxy/sse-endpoint.js';

const PREFIX = '/proxy/agk_KEY/api.example.com:8443';
const ROOT = `${PREFIX}/`;
/** The stream's upstream URL, and its URL at the guard. */
const BASE = 'https://api.example.com:8443/mcp/sse';
const GUARD_URL = `http://guard.example${PREFIX}/mcp/sse`;
const run = (chunks: string[]) => {
  const r = new SseEndpointRewriter(BASE, PREFIX);
  return chunks.map((c) => r.feed(Buffer.from(c, 'latin1')).toString('latin1')).join('') + r.flush().toString('latin1');
};
/** The stream fed one byte at a time, and whole: both must give `want`. */
const everySplit = (t: Test, stream: string, want: string, what: string) => {
  t.equal(run([stream]), want, `${what} (whole)`);
  t.equal(run([...stream]), want, `${what} (byte by byte)`);
  for (let cut = 1; cut < stream.length; cut += Math.max(1, Math.floor(stream.length / 7))) {
    t.equal(run([stream.slice(0, cut), stream.slice(cut)]), want, `${what} (split at ${cut})`);
  }
};

/**
 * The events a WHATWG event-stream parser dispatches from `stream` (HTML
 * §9.2.6), as [type, data], after the guard's own opening comment line (so a
 * BOM of the upstream's is no stream start).
 */
function clientEvents(stream: string): Array<[string, string]> {
  const events: Array<[string, string]> = [];
  let type = '';
  let data: string[] = [];
  const text = `:\n${stream}`;
  for (const line of text.split(/\r\n|\r|\n/)) {
    if (line === '') {
      if (data.length > 0) events.push([type || 'message', data.join('\n')]);
      type = '';
      data = [];
      continue;
    }
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (name === 'event') type = value;
    else if (name === 'data') data.push(value);
  }
  return events;
}

/** Where a client that takes every endpoint event would post. */
const endpointsOf = (stream: string) => clientEvents(stream).filter(([type]) => type === 'endpoint').map(([, data]) => new URL(data, GUARD_URL));

t.test('the endpoint event, whole or split anywhere, gets the prefix; other bytes pass', async (t: Test) => {
  everySplit(t, 'event: endpoint\ndata: /messages?sessionId=abc\n\ndata: {"jsonrpc":"2.0"}\n\n',
    `event: endpoint\ndata: ${PREFIX}/messages?sessionId=abc\n\ndata: {"jsonrpc":"2.0"}\n\n`, 'LF');
  everySplit(t, 'event: endpoint\r\ndata:/messages?sessionId=abc\r\n\r\ndata: x\r\n\r\n',
    `event: endpoint\r\ndata: ${PREFIX}/messages?sessionId=abc\r\n\r\ndata: x\r\n\r\n`, 'CRLF');
  everySplit(t, 'event: endpoint\rdata: /m\r\rdata: x\r\r', `event: endpoint\rdata: ${PREFIX}/m\r\rdata: x\r\r`, 'CR');
  everySplit(t, 'data: /m\nevent: endpoint\n\n', `data: ${PREFIX}/m\nevent: endpoint\n\n`, 'the type after the data');
});

t.test('every other event, comment and field passes byte for byte', async (t: Test) => {
  for (const stream of [
    'data: /not-an-endpoint\n\n',
    'event: endpoint\nevent: message\ndata: /x\n\n', // the last event field is the type
    'event: endpoints\ndata: /x\n\n',
    ': comment\n\nretry: 10\n\nid: 7\n\n',
    `data: ${'x'.repeat(5000)}\n\n`,
    'partial without an end',
    'héllo wörld in latin1 bytes \u00ff\n\n',
    '\n\n\r\n\r\r',
  ]) {
    everySplit(t, stream, stream, JSON.stringify(stream.slice(0, 40)));
  }
});

t.test('an endpoint event anywhere in the stream is rewritten, not only the first event: a client takes each', async (t: Test) => {
  for (const stream of [
    ': ping\n\nevent: endpoint\ndata: ../../../api.github.com/user\n\n',
    '\n\nevent: endpoint\ndata: /../api.github.com/user\n\n',
    'retry: 1\n\nevent: endpoint\ndata: //api.github.com/user\n\n',
    'event: endpoint\ndata: /ok\n\nevent: endpoint\ndata: ../../api.github.com/user\n\n',
    `data: ${'x'.repeat(5000)}\n\nevent: endpoint\ndata: /../api.github.com/user\n\n`,
    // A BOM, after the guard's opening line part of a field name: this first line is no data to a client.
    '\u00ef\u00bb\u00bfdata: http://x\ndata: ../../api.github.com/x\nevent: endpoint\n\n',
    // The same scheme as the client's URL, without '//': relative to it.
    'event: endpoint\ndata: http:../../api.github.com/x\n\n',
    'event: endpoint\ndata: http:/proxy/agk_KEY/api.github.com/x\n\n',
    'event: endpoint\ndata: https:../../api.github.com/x\n\n',
    // Several data lines, which a client joins with LF (and its URL parser drops):
    'event: endpoint\ndata:\ndata: ../../api.github.com/user\n\n',
    'event: endpoint\ndata: x\ndata: /../../api.github.com/user\n\n',
    'event: endpoint\ndata: /..\ndata: /api.github.com/user\n\n',
  ]) {
    const out = run([stream]);
    const endpoints = endpointsOf(out);
    t.ok(endpoints.length > 0, `${JSON.stringify(stream.slice(0, 50))}: an endpoint event still`);
    for (const url of endpoints) t.ok(url.pathname.startsWith(ROOT), `${JSON.stringify(stream.slice(0, 50))}: posts under the tool (${url.pathname})`);
    t.equal(run([...stream]), out, 'the same byte by byte');
  }
});

t.test('dot segments and other origins in the endpoint are resolved before the prefix: the client cannot climb out of its target', async (t: Test) => {
  for (const [data, path] of <Array<[string, string]>>[
    ['/../evil.example/m?s=1', '/evil.example/m?s=1'],
    ['/%2e%2e/evil.example/m', '/evil.example/m'],
    ['/a/./b/../c?x=1', '/a/c?x=1'],
    // WHATWG URL reads '\\' as '/', drops tabs, and takes '.%2e' for '..'.
    ['/..\\evil.example/m', '/evil.example/m'],
    ['/.%2e\\evil.example/x', '/evil.example/x'],
    ['/.\t./evil.example/m', '/evil.example/m'],
    ['/\\evil.example/m', '/'], // another origin to a client (//evil.example/m): nothing of it kept
    ['//evil.example/m', '/'],
    ['https://elsewhere.example/messages', '/'], // an absolute URL of another origin: the client stays at the guard
    ['https://api.example.com:8443/messages?s=1', '/messages?s=1'], // of the upstream's own: through the guard
    ['https:\\\\x/../../../api.github.com/y', '/'], // an authority to WHATWG, a path to urljoin: neither kept
    ['http:x y/../../../api.github.com/user', '/'], // no URL against the upstream's; relative against an http guard's
    ['mailto:a@example.com', '/'],
    // Relative to the stream's URL (/mcp/sse upstream), as the client resolves it:
    ['messages?s=1', '/mcp/messages?s=1'],
    ['../../evil.example/m', '/evil.example/m'],
  ]) {
    const out = run([`event: endpoint\ndata: ${data}\n\n`]);
    t.equal(out, `event: endpoint\ndata: ${PREFIX}${path}\n\n`, data);
    t.ok(endpointsOf(out)[0]!.pathname.startsWith(ROOT), `${data}: stays under the target`);
  }
});

t.test('an event too long to hold passes as it comes; if it is an endpoint event, without its type line', async (t: Test) => {
  const long = 'y'.repeat(MAX_EVENT_BYTES + 10);
  const plain = `data: ${long}\nid: 3\n\ndata: after\n\n`;
  everySplit(t, plain, plain, 'a long message event, byte for byte');
  for (const [stream, what] of <Array<[string, string]>>[
    [`data: ${long}\nevent: endpoint\n\n`, 'type after the long data'],
    [`data: ${long}\r\nevent:endpoint\r\n\r\n`, 'CRLF, no space'],
    [`event: endpoint\ndata: /../../api.github.com/${long}\n\n`, 'type first, long data'],
  ]) {
    const out = run([stream]);
    t.same(endpointsOf(out).filter((url) => !url.pathname.startsWith(ROOT)), [], `${what}: no endpoint the guard did not rewrite`);
    t.equal(run([...stream].reduce<string[]>((pieces, c, i) => (i % 4096 === 0 ? [...pieces, c] : [...pieces.slice(0, -1), pieces.at(-1)! + c]), [])), out, `${what}: the same in 4 KiB chunks`);
  }
  // A lone CR ends a line before the type line: made a comment, not dropped, its end kept (a dropped one joined CR and LF into one end).
  const pad = 'a'.repeat(70_000);
  for (const chunks of [
    [`data: ../../api.github.com/x\npad: ${pad}\nx: a\revent: endpoint\n\nevent: endpoint\n\n`],
    // The hold outgrown in the middle of the type line, which ends in the next chunk.
    [`data: ../../api.github.com/x\npad: ${'a'.repeat(MAX_EVENT_BYTES - 40)}\nevent: endpoint`, '\n\n'],
    [`data: ../../api.github.com/x\npad: ${'a'.repeat(MAX_EVENT_BYTES - 40)}\nevent: end`, 'point\n\n'],
    // An empty chunk between a CR and its LF.
    ['event: endpoint\ndata: ../../api.github.com/x\r', '', '\nevent: endpoint\n\n'],
  ]) {
    const out = run(chunks);
    t.same(endpointsOf(out).filter((url) => !url.pathname.startsWith(ROOT)).map((url) => url.pathname), [], `${JSON.stringify(chunks.map((c) => c.slice(-30)))}: no endpoint the guard did not rewrite`);
  }
  const out = run([`data: ${long}\nevent: endpoint\n\ndata: next\n\n`]);
  t.same(clientEvents(out).map(([type]) => type), ['message', 'message'], 'the long event reaches the client as a message; the next event is untouched');
});

t.test('at the stream\'s end, an endpoint event without its blank line (never dispatched by a conformant client) is rewritten all the same', async (t: Test) => {
  t.equal(run(['event: endpoint\ndata: ../../api.github.com/x']), `event: endpoint\ndata: ${PREFIX}/api.github.com/x`);
  t.equal(run(['event: endpoint\ndata: ../../api.github.com/x\n']), `event: endpoint\ndata: ${PREFIX}/api.github.com/x\n`);
});

t.test('a comment between events (a keep-alive) goes at once; lines of an event wait for its blank line', async (t: Test) => {
  const r = new SseEndpointRewriter(BASE, PREFIX);
  t.equal(r.feed(Buffer.from(': ping\n')).toString(), ': ping\n', 'a keep-alive comment without a blank line');
  t.equal(r.feed(Buffer.from('data: x\n')).toString(), '', 'an event\'s line: held');
  t.equal(r.feed(Buffer.from('\n: ping\r\n')).toString(), 'data: x\n\n: ping\r\n', 'with its blank line; the next comment at once');
});

t.test('an injected credential in the endpoint event (built from the request URL) is redacted, as in a Location', async (t: Test) => {
  const r = new SseEndpointRewriter(BASE, PREFIX, [Buffer.from('sk_live_123'), Buffer.from('sk%5Flive%5F123')]);
  const out = r.feed(Buffer.from('event: endpoint\ndata: /messages?sessionId=1&api_key=sk_live_123\n\ndata: sk_live_123 in a later event\n\n', 'latin1')).toString('latin1');
  t.equal(out, `event: endpoint\ndata: ${PREFIX}/messages?sessionId=1&api_key=[REDACTED]\n\ndata: sk_live_123 in a later event\n\n`, 'the endpoint event only: later events pass untouched');
});

t.test('a chunk of whole events without an endpoint type line goes on as it is (no copy); one with it does not', async (t: Test) => {
  const r = new SseEndpointRewriter(BASE, PREFIX);
  const plain = Buffer.from('event: message\ndata: {"jsonrpc":"2.0","id":1}\n\n');
  t.equal(r.feed(plain), plain, 'the same Buffer');
  const endpoint = Buffer.from('event: message\ndata: 1\n\nevent:endpoint\ndata: ../../api.github.com/x\n\n');
  t.equal(r.feed(endpoint).toString(), `event: message\ndata: 1\n\nevent:endpoint\ndata: ${PREFIX}/api.github.com/x\n\n`);
  t.equal(r.feed(Buffer.from('data: 2\n')).length, 0, 'half an event: held');
  const rest = Buffer.from('\ndata: 3\n\n');
  t.equal(r.feed(rest).toString(), 'data: 2\n\ndata: 3\n\n', 'what was held comes first');
});

t.test('linear in the stream: a megabyte of lines takes no time', async (t: Test) => {
  const r = new SseEndpointRewriter(BASE, PREFIX);
  const chunk = Buffer.from('data: 0123456789\n\n'.repeat(1000), 'latin1');
  const started = performance.now();
  for (let i = 0; i < 60; i++) r.feed(chunk);
  const ms = performance.now() - started;
  t.ok(ms < 500, `${(chunk.length * 60 / 1024 / 1024).toFixed(1)} MiB in ${ms.toFixed(0)} ms`);
});

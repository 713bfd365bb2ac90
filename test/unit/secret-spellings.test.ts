// The spellings of a credential value that redaction looks for (secretSpellings,
// shared/secrets.ts; redactCapture, proxy/exchange.ts): an upstream that echoes
// its request in JSON writes the value as its encoder escapes it. Each case is
// a body as that encoder writes it (Python's json module run for real; PHP's and
// Go's escapes written out as their documentation gives them).
import { spawnSync } from 'node:child_process';
import t from 'tap';
import { redactCapture } from '../../proxy/exchange.js';
import { secretSpellings } from '../../shared/secrets.js';

const SECRET = 'sk/live&x<y>z"q\\é€😀';

const redacted = (body: string) => redactCapture(Buffer.from(body, 'utf8'), secretSpellings(SECRET), false).toString('utf8');

t.test('a value as JSON encoders escape it is redacted', async (t) => {
  const bodies: Record<string, string> = {
    'raw (a header echoed as text)': `authorization: Bearer ${SECRET}`,
    'JSON.stringify (Node)': JSON.stringify({ authorization: `Bearer ${SECRET}` }),
    'percent-encoded (a URL)': `/echo?api_key=${encodeURIComponent(SECRET)}`,
    'form-encoded': `api_key=${new URLSearchParams({ v: SECRET }).toString().slice(2)}`,
    // PHP json_encode: '/' as '\/' (JSON_UNESCAPED_SLASHES off), non-ASCII as \uXXXX (JSON_UNESCAPED_UNICODE off).
    "PHP json_encode's default": '{"authorization":"Bearer sk\\/live&x<y>z\\"q\\\\\\u00e9\\u20ac\\ud83d\\ude00"}',
    // Go encoding/json: <, > and & as \u003c, \u003e, \u0026; UTF-8 kept.
    "Go's encoding/json": '{"authorization":"Bearer sk/live\\u0026x\\u003cy\\u003ez\\"q\\\\é€😀"}',
  };
  for (const [encoder, body] of Object.entries(bodies)) {
    const out = redacted(body);
    t.ok(out.includes('[REDACTED]'), `${encoder}: ${out}`);
    t.notOk(out.includes('sk/live') || out.includes('sk\\/live'), `${encoder}: nothing of the value is left`);
  }
});

t.test("Python's json.dumps (ensure_ascii, its default) is redacted", async (t) => {
  const python = spawnSync('python3', ['-c', 'import json,sys; print(json.dumps({"authorization": "Bearer " + sys.argv[1]}))', SECRET], { encoding: 'utf8' });
  if (python.status !== 0) {
    t.comment(`skipped: python3 did not run (${python.error?.message ?? python.stderr.trim()})`);
    return;
  }
  t.match(python.stdout, /\\u00e9/, 'the body escapes non-ASCII');
  const out = redacted(python.stdout);
  t.ok(out.includes('[REDACTED]'), out);
  t.notOk(out.includes('sk/live'));
});

t.test('a value stored with outer spaces or tabs (before they were refused) is also redacted as the upstream echoes it, without them', async (t) => {
  const spellings = secretSpellings(' sk-live-abc\t').map((b) => b.toString('utf8'));
  t.ok(spellings.includes('sk-live-abc'), 'the trimmed value');
  t.ok(spellings.includes(' sk-live-abc\t'), 'and the value as stored');
});

t.test('percent-encoded as other encoders write it (strict RFC 3986, a slash kept, lower-case hex) and HTML-escaped, the value is redacted too', async (t) => {
  const value = "ab/c+d=e!(x)'&<y>";
  const spellings = new Set(secretSpellings(value).map((b) => b.toString('utf8')));
  for (const [encoder, form] of <Array<[string, string]>>[
    ["PHP rawurlencode / Python quote(safe='')", 'ab%2Fc%2Bd%3De%21%28x%29%27%26%3Cy%3E'],
    ["Python quote (safe='/')", 'ab/c%2Bd%3De%21%28x%29%27%26%3Cy%3E'],
    ['.NET HttpUtility.UrlEncode (lower-case hex)', 'ab%2fc%2bd%3de!(x)%27%26%3cy%3e'],
    ['HTML entities', 'ab/c+d=e!(x)&#39;&amp;&lt;y&gt;'],
  ]) {
    t.ok(spellings.has(form), `${encoder}: ${form}`);
  }
});

t.test('a URL holding the value, encoded again into another URL (a login bounce\'s next=), is redacted', async (t) => {
  const strict = (s: string) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  for (const value of ['k3y/Ab+Cd=', "k3y!x/Ab+Cd='(*)", 'two words']) {
    const spellings = secretSpellings(value);
    const requestUrl = `/login-bounce?page=2&api_key=${encodeURIComponent(value)}`;
    for (const [how, body] of <Array<[string, string]>>[
      ['encodeURIComponent', `/login?next=${encodeURIComponent(requestUrl)}`],
      ['URLSearchParams', `/login?${new URLSearchParams({ next: `/x?api_key=${new URLSearchParams({ v: value }).toString().slice(2)}` })}`],
      ['URLSearchParams of encodeURIComponent', `/login?${new URLSearchParams({ next: requestUrl })}`],
      ['strict RFC 3986, twice', `/login?next=${strict(`/x?api_key=${strict(value)}`)}`],
    ]) {
      const out = redactCapture(Buffer.from(body, 'utf8'), spellings, false).toString('utf8');
      t.ok(out.includes('[REDACTED]'), `${value}, ${how}: ${out}`);
      const decoded = decodeURIComponent(decodeURIComponent(out.replace(/\+/g, ' ')));
      t.notOk(decoded.includes(value), `${value}, ${how}: the value is not recovered by decoding twice`);
    }
  }
});

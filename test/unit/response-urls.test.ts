// Relative references in an upstream's answer, rebased under the tool's prefix
// (proxy/response-urls.ts): what the upstream means, where the client will go.
import t from 'tap';
import { rebaseHeader, rebaseReference, scopeSetCookie } from '../../proxy/response-urls.js';

const BASE = 'https://tools.example.com/api/v1/items';
const PREFIX = '/proxy/agk_KEY/tools.example.com';
/** The tool's root at the guard, under which rebased references land. */
const ROOT = `${PREFIX}/`;

t.test('a relative reference is resolved against the upstream URL and put under the prefix; an absolute one is left alone', async (t) => {
  for (const [ref, out] of <Array<[string, string]>>[
    ['../../../api.github.com/user/repos', `${PREFIX}/api.github.com/user/repos`],
    ['/login?next=%2Fx', `${PREFIX}/login?next=%2Fx`],
    ['next?page=2', `${PREFIX}/api/v1/next?page=2`],
    ['?page=2', `${PREFIX}/api/v1/items?page=2`],
    ['/..\\evil.example/m', `${PREFIX}/evil.example/m`],
    ['/.%2e/evil.example/m', `${PREFIX}/evil.example/m`],
    ['https://elsewhere.example/x', 'https://elsewhere.example/x'],
    ['HTTPS://tools.example.com/x', 'HTTPS://tools.example.com/x'],
    ['//elsewhere.example/x', 'https://elsewhere.example/x'],
    ['\\\\elsewhere.example/x', 'https://elsewhere.example/x'],
    ['mailto:a@example.com', 'mailto:a@example.com'],
    // A special scheme without '//' is relative to a URL of that scheme (WHATWG): resolved as the upstream means it.
    ['https:../../../api.github.com/user/repos', `${PREFIX}/api.github.com/user/repos`],
    ['https:/api.github.com/user', `${PREFIX}/api.github.com/user`],
    ['http:/proxy/agk_KEY/api.github.com/x', 'http://proxy/agk_KEY/api.github.com/x'], // another scheme than the upstream's: an authority
    // Backslashes after a special scheme: an authority to WHATWG, a path to Python's urljoin: written as WHATWG reads it.
    ['https:\\\\elsewhere.example/x', 'https://elsewhere.example/x'],
    ['https:\\\\x/../../../api.github.com/y', 'https://x/api.github.com/y'],
    // Not a URL against the upstream's (an authority with a space): another base or parser might read a path; the tool's root.
    ['http:x y/../../../api.github.com/user', `${PREFIX}/`],
    ['http:[/../../api.github.com/user', `${PREFIX}/`],
  ]) {
    t.equal(rebaseReference(ref, BASE, PREFIX), out, ref);
    // Where a client at the guard's URL then goes.
    const guardUrl = new URL(`http://guard.example${PREFIX}/api/v1/items`);
    const lands = new URL(rebaseReference(ref, BASE, PREFIX), guardUrl);
    if (lands.origin === guardUrl.origin) t.ok(lands.pathname.startsWith(`${PREFIX}/`), `${ref}: stays under the tool's prefix (${lands.pathname})`);
  }
});

t.test('Link rebases each target; Refresh its url', async (t) => {
  t.equal(rebaseHeader('link', '<../p2>; rel="next", <https://x.example/>; rel="help"', BASE, PREFIX), `<${PREFIX}/api/p2>; rel="next", <https://x.example/>; rel="help"`);
  t.equal(rebaseHeader('refresh', '5; url=../x', BASE, PREFIX), `5; url=${PREFIX}/api/x`);
  t.equal(rebaseHeader('refresh', '5;URL="/y"', BASE, PREFIX), `5;URL="${PREFIX}/y"`);
  t.equal(rebaseHeader('refresh', '5', BASE, PREFIX), '5', 'no url: as it was');
});

t.test('linear in the header: values an upstream may send up to 64 KiB take no time (no backtracking)', async (t) => {
  const long = 60_000;
  for (const [name, value] of <Array<[string, string]>>[
    ['refresh', '1'.repeat(long)],
    ['refresh', `1;${' '.repeat(long)}`],
    ['link', '<'.repeat(long)],
    ['link', `<a>; title="${'<'.repeat(long)}`],
    ['location', `a${' '.repeat(long)}b`],
    ['location', `${'\t'.repeat(long)}x`],
  ]) {
    const started = performance.now();
    rebaseHeader(name, value, BASE, PREFIX);
    const ms = performance.now() - started;
    t.ok(ms < 50, `${name}: ${value.slice(0, 12)}… (${value.length} chars) in ${ms.toFixed(1)} ms`);
  }
});

t.test('edge cases are left as they came: an empty reference, a quoted Link parameter, a Refresh with no url', async (t) => {
  t.equal(rebaseReference('', BASE, PREFIX), '', 'empty');
  t.equal(rebaseReference('   ', BASE, PREFIX), '   ', 'blank');
  t.equal(rebaseHeader('link', '<p2>; title="x <y>, z"; rel="next"', BASE, PREFIX), `<${PREFIX}/api/v1/p2>; title="x <y>, z"; rel="next"`, 'a quoted parameter holds < > and , untouched');
  t.equal(rebaseHeader('link', 'not a link', BASE, PREFIX), 'not a link');
  t.equal(rebaseHeader('refresh', '5; urn=x', BASE, PREFIX), '5; urn=x');
  t.equal(rebaseHeader('refresh', '5; url="/x', BASE, PREFIX), `5; url=${PREFIX}/api/v1/%22/x`, 'an unclosed quote is part of the reference, as a browser reads it');
});

t.test('a UTF-8 reference (its bytes read as Latin-1 from the header) is resolved as the client decodes it', async (t) => {
  const latin1 = Buffer.from('Café/ü?q=ß', 'utf8').toString('latin1');
  t.equal(rebaseReference(latin1, BASE, PREFIX), `${PREFIX}/api/v1/Caf%C3%A9/%C3%BC?q=%C3%9F`);
});

t.test('written absolute, the reference lands under the prefix whatever base the client resolves it against: the URL it first opened (before a redirect), or with empty segments dropped (Python urljoin)', async (t) => {
  for (const base of [`${PREFIX}/api/v1/items`, `${PREFIX}/x`, `${PREFIX}//deep//er/`, '/proxy/agk_KEY/evil.example/sse']) {
    for (const ref of ['../../../api.github.com/user/repos', '/api.github.com/user', 'next?page=2', '?page=2', '//elsewhere.example/x']) {
      const out = rebaseReference(ref, BASE, PREFIX);
      const lands = new URL(out, `http://guard.example${base}`);
      if (lands.origin === 'http://guard.example') t.ok(lands.pathname.startsWith(ROOT), `${ref} from ${base}: ${lands.pathname}`);
      t.ok(out.startsWith(ROOT) || out.startsWith('https://'), `${ref}: absolute (${out})`);
    }
  }
});

t.test('Set-Cookie is scoped to the tool: its Path under the prefix, its Domain dropped, the rest as sent', async (t) => {
  const prefix = '/proxy/tcg_abc/api.example.com:8443';
  const cases: [string, string, string][] = [
    ['a=1; Path=/; Domain=example.com; HttpOnly', '/x', `a=1; HttpOnly; Path=${prefix}/`],
    ['b=2;path=/docs/v1;SECURE;SameSite=Lax', '/x', `b=2; SECURE; SameSite=Lax; Path=${prefix}/docs/v1`],
    // No Path, or one that is not a path: the upstream request's directory (RFC 6265 §5.1.4), under the prefix.
    ['c=3; Expires=Wed, 21 Oct 2026 07:28:00 GMT; Max-Age=60', '/api/v1/login?next=/a/b', `c=3; Expires=Wed, 21 Oct 2026 07:28:00 GMT; Max-Age=60; Path=${prefix}/api/v1`],
    ['d=4; Path=docs; domain=.x.test', '/login', `d=4; Path=${prefix}/`],
    ['e=5; Path=', '/', `e=5; Path=${prefix}/`],
    ['f=a=b; ; Path=/x; Path=/y', '/', `f=a=b; Path=${prefix}/y`],
  ];
  for (const [sent, upstreamPath, passed] of cases) t.equal(scopeSetCookie(sent, prefix, upstreamPath), passed, sent);
});

// Relative references in an upstream's answer, rebased under the tool's prefix
// (proxy/response-urls.ts): what the upstream means, where the client will go.
import t from 'tap';
import { rebaseHeader, rebaseReference } from '../../proxy/response-urls.js';

const BASE = 'https://tools.example.com/api/v1/items';
const PREFIX = '/proxy/agk_KEY/tools.example.com';

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

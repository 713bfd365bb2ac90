// Accounts, bearer tokens, the login rate limit, and the error shape every admin
// endpoint answers with, against the real service on a loopback port.
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { gzipSync } from 'node:zlib';
import t, { type Test } from 'tap';
import { JWT_AUDIENCE, JWT_ISSUER } from '../../admin/auth.js';
import { MAX_ADMIN_BODY_BYTES } from '../../admin/http.js';
import { assertError as assertContractError, requestFrom, type Reply } from '../support/checks.js';
import { api, signup, startTestService } from '../support/service.js';

// A low limit keeps the 429 tests quick; the default (10 in 15 min) is config.
const service = await startTestService({ LOGIN_MAX_FAILURES: '3' });
const base = service.url;
t.teardown(() => service.close());

const PASSWORD = 'correct horse battery';
const jwtSecret = new TextEncoder().encode(
  (JSON.parse(readFileSync(join(service.dataDir, 'secrets.json'), 'utf8')) as { jwt_secret: string }).jwt_secret,
);

/** The contract's error, and here also the `field` member of the body naming the field. */
function assertError(t: Test, res: Reply, status: number, code: string, field?: string): void {
  assertContractError(t, res, status, code, field);
  if (field !== undefined) t.equal(res.json?.field, field, `names the field ${field}`);
}

function assertTokenBody(t: Test, res: Reply): void {
  t.same(Object.keys(res.json ?? {}).sort(), ['access_token', 'expires_in', 'token_type']);
  t.match(res.json.access_token, /^[\w-]+\.[\w-]+\.[\w-]+$/, 'access_token is a JWT');
  t.equal(res.json.token_type, 'bearer');
  t.equal(res.json.expires_in, 12 * 3600, 'default lifetime is 12 h');
}

/** A request from a chosen loopback source address: the login limiter counts per client address too. */

const login = (addr: string, email: string, password: string) => requestFrom(base, addr, 'POST', '/auth/login', { email, password });

t.test('signup answers 201 {access_token, token_type: "bearer", expires_in} and the token works', async (t) => {
  const res = await api(base, null, 'POST', '/auth/signup', { email: 'first@example.com', password: PASSWORD });
  t.equal(res.status, 201);
  assertTokenBody(t, res);
  const agents = await api(base, { token: res.json.access_token, auth: { authorization: `Bearer ${res.json.access_token}` } }, 'GET', '/agents');
  t.equal(agents.status, 200);
  t.same(agents.json, [], 'a new organization has no agents');
});

t.test('the email is trimmed and lower-cased at signup and login', async (t) => {
  const res = await api(base, null, 'POST', '/auth/signup', { email: '  Foo@Example.COM ', password: PASSWORD });
  t.equal(res.status, 201);
  const lower = await login('127.0.0.1', 'foo@example.com', PASSWORD);
  t.equal(lower.status, 200, 'the normalised email logs in');
  assertTokenBody(t, lower);
  const mixed = await login('127.0.0.1', ' FOO@example.com', PASSWORD);
  t.equal(mixed.status, 200, 'login normalises too');
  const again = await api(base, null, 'POST', '/auth/signup', { email: 'foo@EXAMPLE.com', password: PASSWORD });
  assertError(t, again, 409, 'conflict');
});

t.test('a bad email is 400 invalid_request naming the field', async (t) => {
  const bad = ['no-at-sign.example.com', 'two@at@example.com', `${'a'.repeat(243)}@example.com`, '@example.com', 'user@', '', 'sp ace@example.com'];
  t.equal(bad[2]!.length, 255, 'one character over the 254 limit');
  for (const email of bad) {
    const res = await api(base, null, 'POST', '/auth/signup', { email, password: PASSWORD });
    assertError(t, res, 400, 'invalid_request', 'email');
  }
  const longest = `${'a'.repeat(242)}@example.com`;
  t.equal(longest.length, 254);
  const ok = await api(base, null, 'POST', '/auth/signup', { email: longest, password: PASSWORD });
  t.equal(ok.status, 201, '254 characters is allowed');
  // Lengths are counted in code points: 254 of them, some outside the BMP (two UTF-16 units each).
  const astral = `${'😀'.repeat(120)}${'a'.repeat(122)}@example.com`;
  t.equal([...astral].length, 254);
  t.equal((await api(base, null, 'POST', '/auth/signup', { email: astral, password: PASSWORD })).status, 201, '254 code points (374 UTF-16 units) is allowed');
  assertError(t, await api(base, null, 'POST', '/auth/signup', { email: `a${astral}`, password: PASSWORD }), 400, 'invalid_request', 'email');
  for (const body of [{ password: PASSWORD }, { email: 42, password: PASSWORD }]) {
    assertError(t, await api(base, null, 'POST', '/auth/signup', body), 400, 'invalid_request', 'email');
  }
});

t.test('a password must be 8 to 256 characters', async (t) => {
  for (const password of ['short77', 'x'.repeat(257), '']) {
    const res = await api(base, null, 'POST', '/auth/signup', { email: `pw${password.length}@example.com`, password });
    assertError(t, res, 400, 'invalid_request', 'password');
  }
  assertError(t, await api(base, null, 'POST', '/auth/signup', { email: 'pwmissing@example.com' }), 400, 'invalid_request', 'password');
  for (const password of ['12345678', 'y'.repeat(256)]) {
    const res = await api(base, null, 'POST', '/auth/signup', { email: `pwok${password.length}@example.com`, password });
    t.equal(res.status, 201, `${password.length} characters is allowed`);
  }
});

t.test('a taken email is 409 conflict', async (t) => {
  const first = await api(base, null, 'POST', '/auth/signup', { email: 'taken@example.com', password: PASSWORD });
  t.equal(first.status, 201);
  const second = await api(base, null, 'POST', '/auth/signup', { email: 'taken@example.com', password: 'another password' });
  assertError(t, second, 409, 'conflict');
  const old = await login('127.0.0.1', 'taken@example.com', PASSWORD);
  t.equal(old.status, 200, 'the first account keeps its password');
});

t.test('login answers 200 with the same body as signup', async (t) => {
  await signup(base, 'login-ok@example.com');
  const res = await login('127.0.0.1', 'login-ok@example.com', PASSWORD);
  t.equal(res.status, 200);
  assertTokenBody(t, res);
  const agents = await api(base, { token: res.json.access_token, auth: { authorization: `Bearer ${res.json.access_token}` } }, 'GET', '/agents');
  t.equal(agents.status, 200, 'the login token authenticates');
});

t.test('a wrong password and an unknown email get identical 401 invalid_credentials answers', async (t) => {
  await signup(base, 'victim@example.com');
  // Separate source addresses so these failures do not count against 127.0.0.1.
  const wrong = await login('127.0.0.2', 'victim@example.com', 'not the password');
  const unknown = await login('127.0.0.3', 'nobody-here@example.com', 'not the password');
  assertError(t, wrong, 401, 'invalid_credentials');
  assertError(t, unknown, 401, 'invalid_credentials');
  t.equal(wrong.text, unknown.text, 'byte-identical bodies');
  t.equal(wrong.headers.get('content-type'), unknown.headers.get('content-type'));
});

t.test('an unknown email costs about the same time as a wrong password (no account enumeration by timing)', async (t) => {
  const timed = async (addr: string, email: string): Promise<number> => {
    const start = performance.now();
    const res = await login(addr, email, 'not the password');
    t.equal(res.status, 401);
    return performance.now() - start;
  };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const wrong: number[] = [];
  const unknown: number[] = [];
  for (let i = 0; i < 5; i++) {
    const email = `timing${i}@example.com`;
    await signup(base, email);
    // Interleaved, each from its own address and email: no limiter counts reach 3.
    wrong.push(await timed(`127.0.4.${2 * i + 1}`, email));
    unknown.push(await timed(`127.0.4.${2 * i + 2}`, `absent${i}@example.com`));
  }
  const ratio = median(unknown) / median(wrong);
  t.ok(ratio > 0.4 && ratio < 2.5, `median unknown ${median(unknown).toFixed(1)} ms vs wrong ${median(wrong).toFixed(1)} ms (ratio ${ratio.toFixed(2)})`);
});

t.test('repeated failures for one email are 429 rate_limited with Retry-After, even with the right password', async (t) => {
  const email = 'limited@example.com';
  await signup(base, email);
  // Each failure from another address: only the email's own counter reaches the limit.
  for (const addr of ['127.0.1.1', '127.0.1.2', '127.0.1.3']) {
    assertError(t, await login(addr, email, 'wrong password!'), 401, 'invalid_credentials');
  }
  const blocked = await login('127.0.1.4', email, 'wrong password!');
  assertError(t, blocked, 429, 'rate_limited');
  const retryAfter = Number(blocked.headers.get('retry-after'));
  t.ok(Number.isInteger(retryAfter) && retryAfter > 0 && retryAfter <= 900, `Retry-After is 1..900 seconds (${retryAfter})`);
  const right = await login('127.0.1.5', email, PASSWORD);
  assertError(t, right, 429, 'rate_limited');
  t.ok(right.headers.get('retry-after'), 'Retry-After on every 429');
  const other = await login('127.0.1.6', 'login-ok@example.com', PASSWORD);
  t.equal(other.status, 200, 'another email from a fresh address is not blocked');
});

t.test('repeated failures from one client address are 429 for any email', async (t) => {
  const addr = '127.0.2.1';
  for (let i = 0; i < 3; i++) {
    assertError(t, await login(addr, `stranger${i}@example.com`, 'wrong password!'), 401, 'invalid_credentials');
  }
  const blocked = await login(addr, 'login-ok@example.com', PASSWORD);
  assertError(t, blocked, 429, 'rate_limited');
  t.ok(Number(blocked.headers.get('retry-after')) > 0, 'Retry-After');
  const elsewhere = await login('127.0.2.2', 'login-ok@example.com', PASSWORD);
  t.equal(elsewhere.status, 200, 'the same account from another address still logs in');
});

t.test('the window starts at the first failure, not at an earlier success from the same address', async (t) => {
  const addr = '127.0.5.1';
  t.equal((await login(addr, 'login-ok@example.com', PASSWORD)).status, 200);
  // A window begun at that success would end 2.2 s sooner, and with it the block.
  await new Promise((resolve) => setTimeout(resolve, 2200));
  for (let i = 0; i < 3; i++) {
    assertError(t, await login(addr, `late${i}@example.com`, 'wrong password!'), 401, 'invalid_credentials');
  }
  const blocked = await login(addr, 'login-ok@example.com', PASSWORD);
  assertError(t, blocked, 429, 'rate_limited');
  const retryAfter = Number(blocked.headers.get('retry-after'));
  t.ok(retryAfter >= 899 && retryAfter <= 900, `Retry-After is the whole 900 s window from the first failure (${retryAfter})`);
});

t.test('a login success resets the failure count for that email', async (t) => {
  const email = 'forgetful@example.com';
  await signup(base, email);
  assertError(t, await login('127.0.3.1', email, 'wrong password!'), 401, 'invalid_credentials');
  assertError(t, await login('127.0.3.2', email, 'wrong password!'), 401, 'invalid_credentials');
  t.equal((await login('127.0.3.3', email, PASSWORD)).status, 200);
  assertError(t, await login('127.0.3.4', email, 'wrong password!'), 401, 'invalid_credentials');
  assertError(t, await login('127.0.3.5', email, 'wrong password!'), 401, 'invalid_credentials');
  t.equal((await login('127.0.3.6', email, PASSWORD)).status, 200, 'not blocked: the count restarted at the success');
});

t.test('bearer tokens on GET /agents', async (t) => {
  const user = await signup(base, 'jwt-owner@example.com');
  const me = JSON.parse(Buffer.from(user.token.split('.')[1]!, 'base64url').toString('utf8')) as { sub: string; org: string };
  t.type(me.sub, 'string', 'the token carries sub');
  t.type(me.org, 'string', 'the token carries org');
  const now = Math.floor(Date.now() / 1000);

  const sign = (claims: { iss?: string; aud?: string; iat?: number; exp?: number }, secret = jwtSecret) =>
    new SignJWT({ org: me.org })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(me.sub)
      .setIssuer(claims.iss ?? JWT_ISSUER)
      .setAudience(claims.aud ?? JWT_AUDIENCE)
      .setIssuedAt(claims.iat ?? now)
      .setExpirationTime(claims.exp ?? now + 3600)
      .sign(secret);
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const unsignedPayload = b64({ sub: me.sub, org: me.org, iss: JWT_ISSUER, aud: JWT_AUDIENCE, iat: now, exp: now + 3600 });
  const [validHeader, validPayload, validSignature] = user.token.split('.');

  const self = await sign({});
  t.equal((await api(base, null, 'GET', '/agents', undefined, { authorization: `Bearer ${self}` })).status, 200, 'a token signed here with the real secret works (so the 401s below are about what they change)');
  t.equal((await api(base, null, 'GET', '/agents', undefined, { authorization: `bearer ${user.token}` })).status, 200, 'the scheme is case-insensitive');

  const cases: Array<[string, Record<string, string>]> = [
    ['no Authorization header', {}],
    ['an empty header', { authorization: '' }],
    ['a token without a scheme', { authorization: user.token }],
    ['another scheme', { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }],
    ['Bearer and nothing', { authorization: 'Bearer ' }],
    ['Bearer with garbage', { authorization: 'Bearer not-a-jwt' }],
    ['Bearer with three garbage parts', { authorization: 'Bearer aaaa.bbbb.cccc' }],
    ['a tampered payload', { authorization: `Bearer ${validHeader}.${b64({ ...me, org: crypto.randomUUID(), iss: JWT_ISSUER, aud: JWT_AUDIENCE, iat: now, exp: now + 3600 })}.${validSignature}` }],
    ['a tampered signature', { authorization: `Bearer ${validHeader}.${validPayload}.${validSignature!.slice(0, -4)}AAAA` }],
    ['signed with another secret', { authorization: `Bearer ${await sign({}, new TextEncoder().encode('another-secret-that-is-long-enough-0123456789'))}` }],
    ['alg none, empty signature', { authorization: `Bearer ${b64({ alg: 'none', typ: 'JWT' })}.${unsignedPayload}.` }],
    ['alg none, any signature', { authorization: `Bearer ${b64({ alg: 'none', typ: 'JWT' })}.${unsignedPayload}.${validSignature}` }],
    ['alg HS512 with the real secret', { authorization: `Bearer ${await new SignJWT({ org: me.org }).setProtectedHeader({ alg: 'HS512' }).setSubject(me.sub).setIssuer(JWT_ISSUER).setAudience(JWT_AUDIENCE).setIssuedAt(now).setExpirationTime(now + 3600).sign(jwtSecret)}` }],
    ['expired beyond the 5 s tolerance', { authorization: `Bearer ${await sign({ iat: now - 3600, exp: now - 30 })}` }],
    ['the wrong iss', { authorization: `Bearer ${await sign({ iss: 'someone-else' })}` }],
    ['the wrong aud', { authorization: `Bearer ${await sign({ aud: 'another-service' })}` }],
    ['a user that does not exist', { authorization: `Bearer ${await new SignJWT({ org: me.org }).setProtectedHeader({ alg: 'HS256' }).setSubject(crypto.randomUUID()).setIssuer(JWT_ISSUER).setAudience(JWT_AUDIENCE).setIssuedAt(now).setExpirationTime(now + 3600).sign(jwtSecret)}` }],
  ];
  for (const [what, headers] of cases) {
    const res = await api(base, null, 'GET', '/agents', undefined, headers);
    t.test(what, async (t) => assertError(t, res, 401, 'unauthorized'));
  }
  const fresh = await api(base, null, 'GET', '/agents', undefined, { authorization: `Bearer ${await sign({ iat: now - 3600, exp: now - 2 })}` });
  t.equal(fresh.status, 200, 'expired by 2 s is within the 5 s clock tolerance');
});

t.test('every authenticated route refuses a request without a token', async (t) => {
  const id = crypto.randomUUID();
  for (const [method, path] of [
    ['POST', '/agents'], [`GET`, `/agents/${id}/proxy-url`], ['DELETE', `/agents/${id}`], ['GET', `/agents/${id}/policy`],
    ['POST', `/agents/${id}/policy`], ['GET', '/credentials'], ['POST', '/credentials'], ['DELETE', `/credentials/${id}`],
    ['POST', '/policy/check'], ['POST', '/audit'], ['GET', '/audit'], ['GET', '/audit/export/pdf'],
  ] as const) {
    const res = await api(base, null, method, path, method === 'POST' ? {} : undefined);
    t.test(`${method} ${path}`, async (t) => assertError(t, res, 401, 'unauthorized'));
  }
});

t.test('request bodies', async (t) => {
  const user = await signup(base);
  t.test('a non-JSON content type is 415 unsupported_media_type', async (t) => {
    const res = await api(base, user, 'POST', '/agents', JSON.stringify({ name: 'x' }), { 'content-type': 'text/plain' });
    assertError(t, res, 415, 'unsupported_media_type');
    const none = await fetch(`${base}/auth/signup`, { method: 'POST', body: new Blob([JSON.stringify({ email: 'ct@example.com', password: PASSWORD })]) });
    t.equal(none.status, 415, 'no content type at all');
    const form = await api(base, null, 'POST', '/auth/signup', 'email=a%40b.c&password=12345678', { 'content-type': 'application/x-www-form-urlencoded' });
    assertError(t, form, 415, 'unsupported_media_type');
    const charset = await api(base, user, 'POST', '/agents', { name: 'charset' }, { 'content-type': 'application/json; charset=utf-8' });
    t.equal(charset.status, 201, 'application/json with a charset is JSON');
  });
  t.test('malformed JSON is 400 invalid_request', async (t) => {
    assertError(t, await api(base, user, 'POST', '/agents', '{"name": "x",'), 400, 'invalid_request');
    assertError(t, await api(base, null, 'POST', '/auth/login', '{email: x}'), 400, 'invalid_request');
    assertError(t, await api(base, user, 'POST', '/agents', '', { 'content-type': 'application/json' }), 400, 'invalid_request');
  });
  t.test('a compressed body is 415 (a coding this API does not read), not malformed JSON', async (t) => {
    const res = await fetch(`${base}/agents`, { method: 'POST', headers: { ...user.auth, 'content-type': 'application/json', 'content-encoding': 'gzip' }, body: new Uint8Array(gzipSync(JSON.stringify({ name: 'zipped' }))) });
    t.equal(res.status, 415);
    t.match(await res.json(), { error: 'unsupported_media_type' });
  });
  t.test('a body that is not UTF-8 is 400 and stores nothing: its bytes are not swapped for U+FFFD into a stored value', async (t) => {
    const org = await signup(base);
    const body = Buffer.concat([Buffer.from('{"name":"k","hostname":"utf8.example.com","cred_type":"query","value":"ab'), Buffer.from([0xe9]), Buffer.from('cd"}')]);
    const res = await fetch(`${base}/credentials`, { method: 'POST', headers: { ...org.auth, 'content-type': 'application/json; charset=iso-8859-1' }, body: new Uint8Array(body) });
    t.equal(res.status, 400);
    t.match(await res.json(), { error: 'invalid_request', message: /UTF-8/ });
    t.strictSame((await api(base, org, 'GET', '/credentials')).json, [], 'nothing stored');
  });
  t.test('a lone surrogate in a string field is stored as UTF-8 keeps it, one U+FFFD, and answered as stored', async (t) => {
    const org = await signup(base);
    const created = await api(base, org, 'POST', '/agents', '{"name":"lone \\ud800 surrogate"}');
    t.equal(created.status, 201);
    t.equal(created.json.name, 'lone \ufffd surrogate');
    t.equal((await api(base, org, 'GET', '/agents')).json[0].name, created.json.name, 'read back as answered');
  });
  t.test('a JSON value that is not an object is 400 invalid_request', async (t) => {
    for (const body of ['[]', '[{"name":"x"}]', '"name"', '42', 'null']) {
      assertError(t, await api(base, user, 'POST', '/agents', body), 400, 'invalid_request');
    }
  });
  t.test('a body over 1 MiB is 413 payload_too_large; exactly 1 MiB is read', async (t) => {
    const prefix = '{"name":"big","log_outputs":"none"';
    const exact = `${prefix}${' '.repeat(MAX_ADMIN_BODY_BYTES - prefix.length - 1)}}`;
    t.equal(Buffer.byteLength(exact), MAX_ADMIN_BODY_BYTES);
    const ok = await api(base, user, 'POST', '/agents', exact);
    t.equal(ok.status, 201, `exactly 1 MiB is accepted (${ok.text.slice(0, 200)})`);
    const over = `${prefix}${' '.repeat(MAX_ADMIN_BODY_BYTES - prefix.length)}}`;
    assertError(t, await api(base, user, 'POST', '/agents', over), 413, 'payload_too_large');
    const chunked = await new Promise<Reply>((resolve, reject) => {
      // No Content-Length: the limit is enforced while reading the chunks.
      const req = httpRequest(`${base}/agents`, { method: 'POST', headers: { ...user.auth, 'content-type': 'application/json' } }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: new Headers({ 'content-type': String(res.headers['content-type']) }), text, json: JSON.parse(text) }));
      });
      req.on('error', reject);
      for (let i = 0; i < 5; i++) req.write(' '.repeat(256 * 1024));
      req.end('{}');
    });
    assertError(t, chunked, 413, 'payload_too_large');
    const agents = await api(base, user, 'GET', '/agents');
    t.same(agents.json.map((a: { name: string }) => a.name), ['charset', 'big'], 'no agent came from a refused body');
  });
});

t.test('routing errors', async (t) => {
  const user = await signup(base);
  assertError(t, await api(base, user, 'GET', '/no-such-thing'), 404, 'not_found');
  assertError(t, await api(base, null, 'GET', '/no-such-thing'), 404, 'not_found');
  assertError(t, await api(base, user, 'GET', '/agents/extra/segments/here'), 404, 'not_found');
  const put = await api(base, user, 'PUT', '/agents', { name: 'x' });
  assertError(t, put, 405, 'method_not_allowed');
  t.match(put.headers.get('allow') ?? '', /GET/, 'Allow names GET');
  t.match(put.headers.get('allow') ?? '', /POST/, 'Allow names POST');
  assertError(t, await api(base, null, 'GET', '/auth/login'), 405, 'method_not_allowed');
  assertError(t, await api(base, user, 'PATCH', `/agents/${crypto.randomUUID()}`, {}), 405, 'method_not_allowed');
});

t.test('GET /health is 200 {status: "ok"} without a token', async (t) => {
  const res = await api(base, null, 'GET', '/health');
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type') ?? '', /^application\/json/);
  t.equal(res.json.status, 'ok');
});

t.test('no error body carries a stack trace or the JWT secret', async (t) => {
  const secretText = new TextDecoder().decode(jwtSecret);
  const res = await api(base, null, 'POST', '/auth/login', '{"email":');
  t.notMatch(res.text, /at .*\.(ts|js):\d+/, 'no stack frames');
  t.notOk(res.text.includes(secretText), 'no secret');
});

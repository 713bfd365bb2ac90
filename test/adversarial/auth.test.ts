// Authentication under attack: forged tokens, a deleted user's token, credential
// stuffing from rotating client addresses, account enumeration, the stored hash's
// strength, and a password too long to be worth hashing.
//
// Already covered in test/integration/admin-auth.test.ts (not repeated here):
// alg none (empty and any signature), HS512, a tampered payload or signature, a
// foreign secret, expired by 30 s, wrong iss / aud, an unknown sub, identical 401
// bodies for an unknown email and a wrong password, and the median-time ratio of
// the two. This file adds the key-confusion forms, the edges of each claim check,
// a user deleted from the real store, the limiter at scale and its symmetry for
// unknown emails, the argon2 parameters on disk, and the cost of a refused password.
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { SignJWT } from 'jose';
import t from 'tap';
import { JWT_AUDIENCE, JWT_ISSUER, PASSWORD_MAX } from '../../admin/auth.js';
import { assertError, percentile, requestFrom, type Reply } from '../support/checks.js';
import { api, signup, startTestService } from '../support/service.js';

// The default limit (10 failures per email or address in 15 min).
const service = await startTestService();
const base = service.url;
t.teardown(() => service.close());

const PASSWORD = 'correct horse battery';
const STORE = join(service.dataDir, 'metadata.sqlite');
const jwtSecret = new TextEncoder().encode((JSON.parse(readFileSync(join(service.dataDir, 'secrets.json'), 'utf8')) as { jwt_secret: string }).jwt_secret);

/** A request from a chosen loopback source address (Linux routes all of 127/8 to lo). */
const login = (addr: string, email: string, password: string) => requestFrom(base, addr, 'POST', '/auth/login', { email, password });

t.test('forged tokens are 401 unauthorized: key confusion and the edge of every claim check', async (t) => {
  const user = await signup(base);
  const me = JSON.parse(Buffer.from(user.token.split('.')[1]!, 'base64url').toString('utf8')) as { sub: string; org: string };
  const now = Math.floor(Date.now() / 1000);
  const claims = (over: { iss?: string; aud?: string | string[]; iat?: number; exp?: number } = {}) =>
    new SignJWT({ org: me.org })
      .setSubject(me.sub)
      .setIssuer(over.iss ?? JWT_ISSUER)
      .setAudience(over.aud ?? JWT_AUDIENCE)
      .setIssuedAt(over.iat ?? now)
      .setExpirationTime(over.exp ?? now + 3600);
  const hs256 = (over = {}) => claims(over).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(jwtSecret);

  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const publicPem = rsa.publicKey.export({ type: 'spki', format: 'pem' }) as string;
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const payload = b64({ sub: me.sub, org: me.org, iss: JWT_ISSUER, aud: JWT_AUDIENCE, iat: now, exp: now + 3600 });

  t.equal((await api(base, null, 'GET', '/agents', undefined, { authorization: `Bearer ${await hs256()}` })).status, 200, 'control: a token signed here with the real secret works');

  const forged: Array<[string, string]> = [
    ['RS256, signed with a generated RSA key', await claims().setProtectedHeader({ alg: 'RS256' }).sign(rsa.privateKey)],
    ['HS256 keyed with the RSA public key PEM (the RS/HS confusion)', await claims().setProtectedHeader({ alg: 'HS256' }).sign(new TextEncoder().encode(publicPem))],
    ['ES256, signed with a generated EC key', await claims().setProtectedHeader({ alg: 'ES256' }).sign(ec.privateKey)],
    ['alg NONE in capitals', `${b64({ alg: 'NONE', typ: 'JWT' })}.${payload}.`],
    ['alg None', `${b64({ alg: 'None' })}.${payload}.${user.token.split('.')[2]}`],
    ['an unknown critical header', await claims().setProtectedHeader({ alg: 'HS256', crit: ['x-must'], 'x-must': 1 } as never).sign(jwtSecret).catch(() => `${b64({ alg: 'HS256', crit: ['x-must'] })}.${payload}.AAAA`)],
    ['expired 7 s ago (beyond the 5 s tolerance)', await hs256({ iat: now - 3600, exp: now - 7 })],
    ['iss in another case', await hs256({ iss: JWT_ISSUER.toUpperCase() })],
    ['iss with a trailing space', await hs256({ iss: `${JWT_ISSUER} ` })],
    ['aud of another service only', await hs256({ aud: [`${JWT_AUDIENCE}-other`] })],
    ['aud as a prefix of the real one', await hs256({ aud: JWT_AUDIENCE.slice(0, -1) })],
    ['five parts (a JWE shape)', `${(await hs256()).split('.').join('.')}.AAAA.BBBB`],
  ];
  for (const [what, token] of forged) {
    const res = await api(base, null, 'GET', '/agents', undefined, { authorization: `Bearer ${token}` });
    t.test(what, async (t) => assertError(t, res, 401, 'unauthorized'));
  }
});

t.test('the token of a user deleted from the store is 401 at once (store row deleted with better-sqlite3)', async (t) => {
  const user = await signup(base);
  const sub = (JSON.parse(Buffer.from(user.token.split('.')[1]!, 'base64url').toString('utf8')) as { sub: string }).sub;
  t.equal((await api(base, user, 'GET', '/agents')).status, 200, 'works while the user exists');
  const db = new Database(STORE, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    const deleted = db.prepare('DELETE FROM users WHERE id = ?').run(sub);
    t.equal(deleted.changes, 1, 'the user row is gone from metadata.sqlite');
  } finally {
    db.close();
  }
  for (const [method, path] of [['GET', '/agents'], ['GET', '/credentials'], ['GET', '/audit'], ['POST', '/agents']] as const) {
    const res = await api(base, user, method, path, method === 'POST' ? { name: 'ghost' } : undefined);
    assertError(t, res, 401, 'unauthorized');
  }
});

t.test('100 failed logins for one account from 100 client addresses: 429 for that account after the limit, even with the right password', async (t) => {
  const victim = await signup(base);
  const statuses: number[] = [];
  for (let i = 0; i < 100; i++) {
    const res = await login(`127.0.6.${i + 1}`, victim.email, `wrong password ${i}`);
    statuses.push(res.status);
    if (res.status === 429 && !(Number(res.headers.get('retry-after')) > 0)) t.fail(`attempt ${i}: 429 without Retry-After`);
  }
  t.same(statuses.slice(0, 10), Array(10).fill(401), 'the first 10 failures are 401');
  t.same(statuses.slice(10), Array(90).fill(429), 'every later attempt is 429, whatever address it comes from');
  const right = await login('127.0.6.200', victim.email, PASSWORD);
  assertError(t, right, 429, 'rate_limited');
  t.ok(Number(right.headers.get('retry-after')) > 0, 'with Retry-After');
  // Each address failed once, so they are not blocked for other accounts.
  const bystander = await signup(base);
  t.equal((await login('127.0.6.1', bystander.email, PASSWORD)).status, 200, 'another account from a used address logs in');
});

t.test('50 wrong passwords sent at once: 10 are checked, the rest 429, and then the right one is 429 too', async (t) => {
  // Each check takes ~30 ms of argon2: counted only as they ended, every guess
  // in flight passed the limit, and the right password among them logged in.
  const victim = await signup(base);
  const guesses = await Promise.all(Array.from({ length: 50 }, (_, i) => login('127.0.12.1', victim.email, `wrong password ${i}`)));
  const statuses = guesses.map((r) => r.status);
  t.equal(statuses.filter((s) => s === 401).length, 10, 'ten guesses were checked');
  t.equal(statuses.filter((s) => s === 429).length, 40, 'the rest were refused before any check');
  assertError(t, await login('127.0.12.1', victim.email, PASSWORD), 429, 'rate_limited');
});

t.test('right passwords sent at once: those past the limit are told to retry in a second, not in the window\'s 15 minutes', async (t) => {
  // Ten users behind one address (a NAT, or the proxy's load balancer) logging in
  // together: none failed, so the ones refused for the attempts in flight may retry at once.
  const users = await Promise.all(Array.from({ length: 14 }, () => signup(base)));
  const answers = await Promise.all(users.map((u) => login('127.0.13.1', u.email, PASSWORD)));
  const refused = answers.filter((r) => r.status === 429);
  t.ok(refused.length > 0, `${refused.length} of 14 refused while 10 were checked`);
  for (const r of refused) t.equal(r.headers.get('retry-after'), '1', 'Retry-After: 1');
  t.equal(answers.filter((r) => r.status === 200).length, 14 - refused.length, 'the others logged in');
  t.equal((await login('127.0.13.1', users[0]!.email, PASSWORD)).status, 200, 'and once they are over, a login goes through');
});

t.test('a spoofed X-Forwarded-For does not give one client address fresh counters', async (t) => {
  const statuses: number[] = [];
  for (let i = 0; i < 12; i++) {
    const res = await requestFrom(base, '127.0.10.1', 'POST', '/auth/login', { email: `spoof${i}@example.com`, password: 'wrong password!' }, { 'x-forwarded-for': `203.0.113.${i + 1}`, forwarded: `for=198.51.100.${i + 1}`, 'x-real-ip': `192.0.2.${i + 1}` });
    statuses.push(res.status);
  }
  t.same(statuses, [...Array(10).fill(401), 429, 429], 'counted against the TCP peer, whatever the headers claim');
});

t.test('an unknown email is locked out exactly like a real one (the lockout reveals no account)', async (t) => {
  const known = await signup(base);
  const unknown = `nobody-${Date.now()}@example.com`;
  const run = async (email: string, net: number) => {
    const out: Reply[] = [];
    for (let i = 0; i < 12; i++) out.push(await login(`127.0.${net}.${i + 1}`, email, 'wrong password!'));
    return out;
  };
  const [forKnown, forUnknown] = [await run(known.email, 7), await run(unknown, 8)];
  t.same(forKnown.map((r) => r.status), forUnknown.map((r) => r.status), 'the same sequence of statuses');
  t.equal(forKnown[0]!.text, forUnknown[0]!.text, 'identical 401 bodies');
  t.equal(forKnown[11]!.text, forUnknown[11]!.text, 'identical 429 bodies');
  t.equal(forKnown[11]!.status, 429);
});

t.test('stored password hashes are argon2id with m ≥ 19456 KiB, t ≥ 2, p ≥ 1', async (t) => {
  const user = await signup(base);
  const db = new Database(STORE, { readonly: true, fileMustExist: true });
  let rows: { email: string; password_hash: string }[];
  try {
    rows = db.prepare('SELECT email, password_hash FROM users').all() as typeof rows;
  } finally {
    db.close();
  }
  t.ok(rows.some((r) => r.email === user.email), 'the new user is in the store');
  t.ok(rows.length >= 3, `${rows.length} users`);
  for (const { email, password_hash: hash } of rows) {
    // PHC string format: $argon2id$v=19$<params, any order>$<salt>$<hash>.
    const m = /^\$argon2id\$v=19\$([a-z]=\d+(?:,[a-z]=\d+)*)\$[A-Za-z0-9+/]{16,}\$[A-Za-z0-9+/]{32,}$/.exec(hash);
    t.ok(m, `${email}: a PHC argon2id string (${hash.slice(0, 40)}...)`);
    if (!m) continue;
    const params = Object.fromEntries(m[1]!.split(',').map((kv) => kv.split('='))) as Record<string, string>;
    t.ok(Number(params.m) >= 19456, `${email}: m=${params.m}`);
    t.ok(Number(params.t) >= 2, `${email}: t=${params.t}`);
    t.ok(Number(params.p) >= 1, `${email}: p=${params.p}`);
    t.notOk(hash.includes(PASSWORD), 'the password is not in it');
  }
  const salts = rows.map((r) => r.password_hash.split('$')[4]);
  t.equal(new Set(salts).size, salts.length, 'every hash has its own salt');
});

t.test('a password over the maximum is 400 before any hashing: much faster than a real hash, and not counted', async (t) => {
  const user = await signup(base);
  const time = async (fn: () => Promise<Reply>, expect: number) => {
    const started = performance.now();
    const res = await fn();
    t.equal(res.status, expect, res.text.slice(0, 120));
    return performance.now() - started;
  };
  const real: number[] = [];
  const long: number[] = [];
  const huge: number[] = [];
  const tooLong = 'p'.repeat(PASSWORD_MAX + 1);
  const hugePassword = 'p'.repeat(1_000_000);
  for (let i = 0; i < 7; i++) {
    real.push(await time(() => login('127.0.9.1', user.email, PASSWORD), 200));
    long.push(await time(() => login('127.0.9.2', user.email, tooLong), 400));
    huge.push(await time(() => login('127.0.9.2', user.email, hugePassword), 400));
  }
  const signups: number[] = [];
  for (let i = 0; i < 3; i++) {
    signups.push(await time(() => api(base, null, 'POST', '/auth/signup', { email: `long-${i}-${Date.now()}@example.com`, password: hugePassword }), 400));
  }
  const medReal = percentile(real, 50);
  const medLong = percentile(long, 50);
  const medHuge = percentile(huge, 50);
  const medSignup = percentile(signups, 50);
  t.ok(medLong * 4 < medReal, `257 characters: median ${medLong.toFixed(1)} ms vs a real login ${medReal.toFixed(1)} ms`);
  // A megabyte takes a while to read and parse, but a hash on top would cost a
  // whole real login more: below one real login means no hash ran (loaded
  // machines stretch both alike).
  t.ok(medHuge < medReal, `1,000,000 characters: median ${medHuge.toFixed(1)} ms vs ${medReal.toFixed(1)} ms`);
  t.ok(medSignup < medReal, `signup with 1,000,000 characters: median ${medSignup.toFixed(1)} ms vs ${medReal.toFixed(1)} ms`);
  const refused = await login('127.0.9.2', user.email, tooLong);
  assertError(t, refused, 400, 'invalid_request');
  t.equal(refused.json.field, 'password');
  // 15 refused bodies from 127.0.9.2: none counted as a failed login.
  t.equal((await login('127.0.9.2', user.email, PASSWORD)).status, 200, 'the address that sent them is not rate-limited');
});

// Accounts: signup, login, and the bearer-token check every other admin route uses.
import argon2 from 'argon2';
import { SignJWT, jwtVerify } from 'jose';
import { LRUCache } from 'lru-cache';
import { entryBound } from '../shared/lru-bound.js';
import { GuardError } from '../shared/errors.js';
import { clientNetwork } from '../shared/ip.js';
import type { MetadataStore } from '../shared/stores/metadata-store.js';
import type { User } from '../shared/types.js';
import { json, readJsonObject, stringField, type AdminRequest, type AdminResponse } from './http.js';
import { longerThan } from '../shared/text.js';
import { OneAtATime } from './one-at-a-time.js';

export const JWT_ISSUER = 'tool-call-guard';
export const JWT_AUDIENCE = 'tool-call-guard-admin';
export const PASSWORD_MIN = 8;
export const PASSWORD_MAX = 256;
export const EMAIL_MAX = 254;

// OWASP Password Storage Cheat Sheet: argon2id, m=19 MiB, t=2, p=1 is the
// minimum; we use m=19 MiB, t=3 so a login costs ~30 ms on this 2-core machine.
export const ARGON2_OPTIONS = { type: argon2.argon2id, memoryCost: 19456, timeCost: 3, parallelism: 1 } as const;

// Password hashes (signup, login) run one at a time per process. Each is ~30 ms
// of a core on libuv's pool, which chDB's inserts share: 100 signup attempts a
// second took the all-in-one proxy beside them from 15,500 to 3,300 calls a
// second and left its audit 38,709 rows behind in 8 s (docs/performance.md;
// test/integration/auth-load.test.ts). One at a time, they take at most one
// core. Client networks take turns, at most PASSWORD_WAITING_PER_ADDRESS waiting
// each (429; at least LOGIN_MAX_FAILURES' default, so that one address meets the
// login limit first), PASSWORD_WAITING_MAX in all (~8 s of work; the next is 503):
// a network keeping its share full delays another's check by one of its own.
export const PASSWORD_WAITING_MAX = 256;
export const PASSWORD_WAITING_PER_ADDRESS = 16;

/** The authenticated caller of an admin route. */
export interface Caller {
  userId: string;
  orgId: string;
  /** When the caller's token expires (ms since the epoch): a stream ends then. */
  expiresAt?: number;
}

export interface AuthOptions {
  store: MetadataStore;
  jwtSecret: Uint8Array;
  jwtTtlSeconds: number;
  loginMaxFailures: number;
  loginWindowSeconds: number;
  /** Signups one client network may attempt in `signupWindowSeconds`. */
  signupMax: number;
  signupWindowSeconds: number;
}

export function createAuth(options: AuthOptions) {
  const { store, jwtSecret, jwtTtlSeconds } = options;
  const limiter = createFailureLimiter(options.loginMaxFailures, options.loginWindowSeconds * 1000);
  const signups = createFailureLimiter(options.signupMax, options.signupWindowSeconds * 1000);
  const passwordWork = new OneAtATime('password checks', PASSWORD_WAITING_MAX, PASSWORD_WAITING_PER_ADDRESS, { owner: 'client address', limit: 'password_checks' });
  // A hash of a random password, verified when the email is unknown so that an
  // unknown email costs the same argon2 work as a wrong password.
  const decoyHash = argon2.hash(crypto.randomUUID(), ARGON2_OPTIONS);

  async function issueToken(user: User): Promise<{ access_token: string; token_type: 'bearer'; expires_in: number }> {
    const token = await new SignJWT({ org: user.orgId })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(user.id)
      .setIssuer(JWT_ISSUER)
      .setAudience(JWT_AUDIENCE)
      .setIssuedAt()
      .setExpirationTime(`${jwtTtlSeconds}s`)
      .sign(jwtSecret);
    return { access_token: token, token_type: 'bearer', expires_in: jwtTtlSeconds };
  }

  function readAccount(req: AdminRequest): { email: string; password: string } {
    const body = readJsonObject(req);
    const email = stringField(body, 'email').trim().toLowerCase();
    // At most EMAIL_MAX code points, as every length (docs/api.md); one counted in UTF-16 units refused some that fit.
    if (email.length === 0 || longerThan(email, EMAIL_MAX) || email.split('@').length !== 2 || email.startsWith('@') || email.endsWith('@') || /\s/.test(email)) {
      throw new GuardError('invalid_request', `Field 'email' must be an email address of at most ${EMAIL_MAX} characters.`, { field: 'email' });
    }
    const password = stringField(body, 'password', { min: PASSWORD_MIN, max: PASSWORD_MAX });
    return { email, password };
  }

  async function signup(req: AdminRequest): Promise<AdminResponse> {
    const { email, password } = readAccount(req);
    // Every well-formed attempt counts, also one that finds its email taken
    // (which would otherwise tell emails apart at any rate).
    const network = clientNetwork(req.remoteAddress);
    const retryAfter = signups.take([`addr:${network}`]);
    if (retryAfter > 0) {
      throw new GuardError('rate_limited', `${options.signupMax} signups from this client address within ${options.signupWindowSeconds} s; retry later.`, { limit: 'signups', retry_after: retryAfter }, { 'retry-after': String(retryAfter) });
    }
    if (await store.findUserByEmail(email)) throw new GuardError('conflict', 'An account with that email already exists.');
    const hash = await passwordWork.run(network, () => argon2.hash(password, ARGON2_OPTIONS), req.signal);
    const user = await store.createUserWithOrg(email, hash);
    return json(201, await issueToken(user));
  }

  async function login(req: AdminRequest): Promise<AdminResponse> {
    const { email, password } = readAccount(req);
    const network = clientNetwork(req.remoteAddress);
    const keys = [`email:${email}`, `addr:${network}`];
    // The attempt takes its place before the password is checked (~30 ms of
    // argon2): guesses sent at once count as they start, not as they end.
    const retryAfter = limiter.begin(keys);
    if (retryAfter > 0) {
      throw new GuardError('rate_limited', 'Too many failed logins; retry later.', undefined, { 'retry-after': String(retryAfter) });
    }
    let outcome: 'ok' | 'failed' | 'error' = 'error'; // a store that failed is not the caller's failure
    let user;
    try {
      user = await store.findUserByEmail(email);
      const passwordHash = user ? user.passwordHash : await decoyHash;
      const verified = await passwordWork.run(network, () => argon2.verify(passwordHash, password), req.signal);
      outcome = user && verified ? 'ok' : 'failed';
    } finally {
      limiter.end(keys, outcome === 'failed');
    }
    if (!user || outcome !== 'ok') throw new GuardError('invalid_credentials');
    limiter.clear(`email:${email}`);
    return json(200, await issueToken(user));
  }

  /** The caller named by a valid bearer token, or 401 `unauthorized`. */
  async function authenticate(req: AdminRequest): Promise<Caller> {
    const header = req.headers.authorization ?? '';
    const match = /^Bearer ([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$/i.exec(header);
    if (!match) throw new GuardError('unauthorized');
    let payload;
    try {
      ({ payload } = await jwtVerify(match[1]!, jwtSecret, {
        algorithms: ['HS256'],
        issuer: JWT_ISSUER,
        audience: JWT_AUDIENCE,
        requiredClaims: ['sub', 'exp', 'iat'],
        clockTolerance: 5,
      }));
    } catch {
      throw new GuardError('unauthorized', 'The bearer token is invalid or expired.');
    }
    if (typeof payload.sub !== 'string' || typeof payload.org !== 'string') throw new GuardError('unauthorized');
    // A deleted user's token stops working even before it expires.
    const user = await store.findUserById(payload.sub);
    if (!user || user.orgId !== payload.org) throw new GuardError('unauthorized');
    return { userId: user.id, orgId: user.orgId, expiresAt: (payload.exp ?? 0) * 1000 };
  }

  return { signup, login, authenticate };
}

export type Auth = ReturnType<typeof createAuth>;

/**
 * Counts failed logins (or, through `take`, signups) per key (an email, a client
 * network: an IPv4 address or an IPv6 /64) in a fixed window, and the attempts still being checked: an
 * attempt is refused when the failures and the attempts in flight together
 * reach the limit, so a burst of concurrent guesses gets no more tries than
 * guesses sent one after another.
 * Bounded by an LRU so a flood of distinct keys cannot grow memory without limit.
 */
function createFailureLimiter(maxFailures: number, windowMs: number) {
  const failures = new LRUCache<string, { count: number; pending: number; resetAt: number }>(entryBound(100_000));
  const current = (key: string, now: number) => {
    let entry = failures.get(key);
    if (!entry || entry.resetAt <= now) {
      entry = { count: 0, pending: entry?.pending ?? 0, resetAt: now + windowMs };
      failures.set(key, entry);
    }
    return entry;
  };
  const limiter = {
    /** 0 and the attempt counted as in flight, or the seconds to wait (nothing counted). */
    begin(keys: string[]): number {
      const now = Date.now();
      let wait = 0;
      for (const key of keys) {
        const entry = failures.get(key);
        if (!entry || entry.resetAt <= now) continue;
        // Failures alone: until the window ends. Attempts in flight (~30 ms of argon2 each, or waiting for it) are no failure yet: a second.
        if (entry.count >= maxFailures) wait = Math.max(wait, Math.ceil((entry.resetAt - now) / 1000));
        else if (entry.count + entry.pending >= maxFailures) wait = Math.max(wait, 1);
      }
      if (wait > 0) return wait;
      for (const key of keys) current(key, now).pending += 1;
      return 0;
    },
    /** The attempt begun is over; a failed one counts. */
    end(keys: string[], failed: boolean): void {
      const now = Date.now();
      for (const key of keys) {
        const entry = current(key, now);
        entry.pending = Math.max(0, entry.pending - 1);
        if (!failed) continue;
        // The window starts at the first failure: one begun at an earlier success
        // from the same address would end early and hand out a fresh set of tries.
        if (entry.count === 0) entry.resetAt = now + windowMs;
        entry.count += 1;
      }
    },
    /** An attempt counted as it starts (the count is of attempts, not failures): 0, or the seconds to wait (nothing counted). */
    take(keys: string[]): number {
      const wait = limiter.begin(keys);
      if (wait === 0) limiter.end(keys, true);
      return wait;
    },
    clear(key: string): void {
      failures.delete(key);
    },
  };
  return limiter;
}

// Secrets: the JWT signing key, the credential encryption key (AES-256-GCM), agent
// API keys and their hashes.
import { API_KEY_LENGTH, API_KEY_PREFIX } from './http.js';
import { createCipheriv, createDecipheriv, generateKeyPairSync, hash, randomBytes } from 'node:crypto';
import { chmodSync, closeSync, existsSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from './config.js';
import { signingKeyFromPem, type SigningKey } from './audit/seal.js';

export interface Secrets {
  jwtSecret: Uint8Array;
  encryptionKey: Buffer;
}

interface GeneratedSecrets {
  jwt_secret: string;
  secret_key: string;
}

/**
 * The environment wins; otherwise (all-in-one only) the secrets are generated once
 * into DATA_DIR/secrets.json with mode 0600 and read back on every start.
 */
export function loadSecrets(config: Readonly<Config>, options: { allowGenerate: boolean }): Secrets {
  let jwt = config.jwtSecret;
  let key = config.secretKey;
  if (jwt === null || key === null) {
    if (!options.allowGenerate) {
      throw new Error('JWT_SECRET and SECRET_KEY must be set in split mode (every process must share them)');
    }
    const generated = readOrCreateGenerated(config.dataDir);
    jwt ??= generated.jwt_secret;
    key ??= generated.secret_key;
  }
  return { jwtSecret: new TextEncoder().encode(jwt), encryptionKey: Buffer.from(key, 'hex') };
}

/** The file an all-in-one process keeps its generated audit signing key in. */
export const AUDIT_KEY_FILE = 'audit-signing-key.pem';

/**
 * The Ed25519 key that signs audit seals: AUDIT_SIGNING_KEY, else (all-in-one
 * only) DATA_DIR/audit-signing-key.pem, generated once with mode 0600.
 */
export function loadAuditSigningKey(config: Readonly<Config>, options: { allowGenerate: boolean }): SigningKey {
  if (config.auditSigningKey === null && !options.allowGenerate) throw new Error('AUDIT_SIGNING_KEY must be set in split mode (every process must share it)');
  const existing = readAuditSigningKey(config);
  if (existing !== null) return existing;
  const { privateKey } = generateKeyPairSync('ed25519');
  createFileOnce(config.dataDir, AUDIT_KEY_FILE, String(privateKey.export({ type: 'pkcs8', format: 'pem' })));
  return readAuditSigningKey(config)!;
}

/** The audit signing key the configuration names or DATA_DIR holds, without making one (null: neither). */
export function readAuditSigningKey(config: Readonly<Config>): SigningKey | null {
  if (config.auditSigningKey !== null) return signingKeyFromPem(config.auditSigningKey);
  const file = join(config.dataDir, AUDIT_KEY_FILE);
  if (!existsSync(file)) return null;
  try {
    return signingKeyFromPem(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`${file} is damaged (${(err as Error).message}); restore it, or remove it to start a new key (seals signed with the old one then need its public key to verify)`);
  }
}

function readOrCreateGenerated(dataDir: string): GeneratedSecrets {
  const file = join(dataDir, 'secrets.json');
  if (!existsSync(file)) {
    const generated: GeneratedSecrets = {
      jwt_secret: randomBytes(48).toString('base64url'),
      secret_key: randomBytes(32).toString('hex'),
    };
    createFileOnce(dataDir, 'secrets.json', JSON.stringify(generated, null, 2) + '\n');
  }
  let parsed: Partial<GeneratedSecrets> | null = null;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<GeneratedSecrets> | null;
  } catch {
    // An empty or cut file (written by a version before createFileOnce, or edited):
    // the same clear refusal as a file with wrong fields.
  }
  if (typeof parsed?.jwt_secret !== 'string' || parsed.jwt_secret.length < 32 || !/^[0-9a-f]{64}$/.test(parsed.secret_key ?? '')) {
    throw new Error(`${file} is damaged; restore it or remove it (credentials sealed with the old key become unreadable)`);
  }
  return parsed as GeneratedSecrets;
}

/**
 * Creates DIR/NAME holding `text`, mode 0600, unless it exists: written whole and
 * synced under a temporary name, then linked into place and the directory synced.
 * A power cut leaves either no file or the whole file, never an empty one, and of
 * two processes starting at once the second keeps the first's (the caller reads
 * the file back).
 */
export function createFileOnce(dir: string, name: string, text: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, name);
  const tmp = `${file}.${process.pid}.tmp`;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    linkSync(tmp, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    unlinkSync(tmp);
  }
  chmodSync(file, 0o600);
  const dirFd = openSync(dir, 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}

// AES-256-GCM with a random 96-bit IV; the additional data binds a sealed value to
// its org and hostname so a value copied into another record does not open.
const SEALED_VERSION = 'v1';

export function sealValue(key: Buffer, plaintext: string, associated: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(associated, 'utf8'));
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return `${SEALED_VERSION}:${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
}

/** What a credential sealed under another SECRET_KEY answers, in the log and at the start. */
export const WRONG_SECRET_KEY = 'SECRET_KEY does not open the stored credentials: they were sealed with another key. Start every process with the SECRET_KEY they were stored with (DATA_DIR/secrets.json where the service generated it, or the environment of the process that stored them)';

/**
 * Checks at the start that SECRET_KEY opens a stored credential: a process
 * started with another key (the environment's over a generated secrets.json,
 * split-mode processes set apart) was ready and answered every call to a host
 * with a credential 500, logging only the cipher's "unable to authenticate data".
 */
export function checkSecretKey(key: Buffer, sample: { orgId: string; hostname: string; sealedValue: string } | undefined): void {
  if (sample === undefined) return;
  try {
    openValue(key, sample.sealedValue, credentialAssociatedData(sample.orgId, sample.hostname));
  } catch {
    throw new Error(WRONG_SECRET_KEY);
  }
}

export function openValue(key: Buffer, sealed: string, associated: string): string {
  const [version, payload] = sealed.split(':', 2);
  if (version !== SEALED_VERSION || payload === undefined) throw new Error('unknown sealed value format');
  const raw = Buffer.from(payload, 'base64');
  // IV and a whole tag: GCM would check a shorter tag (down to 4 bytes) as given.
  if (raw.length < 28) throw new Error('sealed value too short');
  const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12), { authTagLength: 16 });
  decipher.setAAD(Buffer.from(associated, 'utf8'));
  decipher.setAuthTag(raw.subarray(12, 28));
  return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
}

/**
 * The byte spellings under which a credential value can come back in a response
 * body that echoes the request (raw in a header, percent- or form-encoded in a
 * URL, JSON-escaped as the common encoders escape it), longest first: what the
 * audit's captured output and the redirects passed back must not hold (see
 * redactCapture in proxy/exchange.ts).
 */
export function secretSpellings(value: string): Buffer[] {
  const json = JSON.stringify(value).slice(1, -1);
  const unicodeEscape = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
  // Python's json.dumps (ensure_ascii) and PHP's json_encode: non-ASCII as \uXXXX (UTF-16 units).
  const ascii = json.replace(/[\u0080-\uffff]/g, unicodeEscape);
  const forms = new Set([
    value,
    encodeURIComponent(value),
    new URLSearchParams({ v: value }).toString().slice(2),
    json,
    ascii,
    ascii.replace(/\//g, '\\/'), // PHP's json_encode also escapes '/' (its default: both)
    json.replace(/\//g, '\\/'),
    json.replace(/[<>&]/g, unicodeEscape), // Go's encoding/json escapes <, > and & for HTML
    ...percentForms(value),
    // An HTML page or XML that echoes it (an error page, a form's hidden field).
    value.replace(/[&<>"']/g, (c) => HTML_ENTITIES[c]!),
    value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`),
  ]);
  // A URL holding the value, itself encoded into another URL's parameter: a
  // login bounce (`/login?next=` + the request's URL encoded) hands the agent
  // `%252F` for the `%2F` of the query credential it came with. Each escaped
  // spelling encoded again as encodeURIComponent, strict RFC 3986 encoders
  // (which also escape !'()*) and URLSearchParams write it.
  for (const form of [...forms]) {
    if (form.includes('%') || (form.includes('+') && form !== value)) {
      const component = encodeURIComponent(form);
      forms.add(component);
      forms.add(strictEscape(component));
      forms.add(new URLSearchParams({ v: form }).toString().slice(2));
    }
  }
  // A header value's outer spaces and tabs are dropped by the upstream's parser
  // (RFC 9110 optional whitespace), which then echoes the value without them.
  const core = value.replace(/^[ \t]+|[ \t]+$/g, '');
  const spellings: Buffer[] = [...forms].filter((f) => f.length > 0).map((f) => Buffer.from(f, 'utf8'));
  if (core !== value && core.length > 0) spellings.push(...secretSpellings(core));
  return spellings.sort((a, b) => b.length - a.length);
}

const HTML_ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** encodeURIComponent's output as strict RFC 3986 encoders write it: !'()* escaped too. */
function strictEscape(component: string): string {
  return component.replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * The value percent-encoded as other encoders write it: RFC 3986's strict set
 * (PHP's rawurlencode, Python's quote with safe=''), which also escapes
 * !'()*; Python's quote with its default safe='/'; each with lower-case hex;
 * and .NET's HttpUtility.UrlEncode (lower-case hex, !()* kept, a space as '+').
 */
function percentForms(value: string): string[] {
  const component = encodeURIComponent(value);
  const strict = strictEscape(component);
  const slashKept = strict.replace(/%2F/g, '/');
  const lower = (s: string) => s.replace(/%[0-9A-F]{2}/g, (p) => p.toLowerCase());
  // .NET keeps !()* and writes a space as '+', but escapes '.
  const dotnet = lower(strict).replace(/%2[189a]/g, (p) => String.fromCharCode(parseInt(p.slice(1), 16))).replace(/%20/g, '+');
  return [strict, slashKept, lower(component), lower(strict), lower(slashKept), lower(new URLSearchParams({ v: value }).toString().slice(2)), dotnet];
}

export function credentialAssociatedData(orgId: string, hostname: string): string {
  return `${orgId}\n${hostname}`;
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** `agk_` + 40 base62 characters from the CSPRNG, by rejection sampling (no modulo bias). */
export function generateApiKey(): string {
  let out = API_KEY_PREFIX;
  while (out.length < API_KEY_LENGTH) {
    for (const byte of randomBytes(64)) {
      if (byte < 248 && out.length < API_KEY_LENGTH) out += BASE62[byte % 62];
    }
  }
  return out;
}

export function hashApiKey(apiKey: string): string {
  // One call, no Hash object: this runs on every proxied request.
  return hash('sha256', apiKey, 'hex');
}

/** The visible part of a key: its first 12 characters and an ellipsis. */
export function apiKeyPrefix(apiKey: string): string {
  return `${apiKey.slice(0, 12)}...`;
}

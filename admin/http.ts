// The admin API's request and response, independent of the server that carries
// them (the public uWS listener in all-in-one mode, the admin process in split mode).
import { isUtf8 } from 'node:buffer';
import { wellFormed } from '../shared/audit/entry-json.js';
import { codePointLength, longerThan } from '../shared/text.js';
import { GuardError } from '../shared/errors.js';

export const MAX_ADMIN_BODY_BYTES = 1024 * 1024;

export interface AdminRequest {
  method: string; // upper case
  path: string; // without the query
  query: URLSearchParams;
  /** Lower-cased names; a repeated header keeps its first value. */
  headers: Record<string, string>;
  body: Buffer;
  remoteAddress: string;
  /** Aborted when the client closes the connection before its answer (set by the server's adapter). */
  signal?: AbortSignal;
}

export interface AdminResponse {
  status: number;
  headers: Record<string, string>;
  /** The whole body, or its pieces in order (sent without joining them); '' for a streamed response. */
  body: string | Buffer | readonly Buffer[];
  /**
   * A streamed body (GET /audit/stream): called once, right after the head is
   * sent, with where to write; returns what to call when the stream is over for
   * any reason (the client went away, was dropped as too slow, or end() ran).
   */
  stream?: (sink: StreamSink) => () => void;
}

/** Where a streamed response's body goes (server/admin-adapter.ts writes it to the client). */
export interface StreamSink {
  /** Sends a chunk; false once the stream is over (then stop writing). */
  write(chunk: string | Uint8Array): boolean;
  /** Ends the response; safe to call more than once. */
  end(): void;
}

export function json(status: number, value: unknown, headers: Record<string, string> = {}): AdminResponse {
  return { status, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(value) };
}

export function noContent(): AdminResponse {
  return { status: 204, headers: {}, body: '' };
}

/** The body as a JSON object, or the contract's 415/400. Size is checked (413) by the server while reading. */
export function readJsonObject(req: AdminRequest): Record<string, unknown> {
  const type = req.headers['content-type'] ?? '';
  if (!/^application\/([a-z0-9.+-]*\+)?json\s*(;|$)/i.test(type)) {
    throw new GuardError('unsupported_media_type');
  }
  // A compressed body is a coding this API does not read (RFC 9110 §15.5.16: 415), not malformed JSON.
  const coding = req.headers['content-encoding']?.trim().toLowerCase();
  if (coding !== undefined && coding !== '' && coding !== 'identity') {
    throw new GuardError('unsupported_media_type', `Content-Encoding ${coding.slice(0, 40)} is not supported; send the JSON uncompressed.`);
  }
  // JSON is UTF-8 (RFC 8259 §8.1); decoding other bytes would swap them for
  // U+FFFD, and store another value (a credential, a name) than the one sent.
  if (!isUtf8(req.body)) throw new GuardError('invalid_request', 'The body is not valid UTF-8.');
  let value: unknown;
  try {
    value = JSON.parse(req.body.toString('utf8'));
  } catch {
    throw new GuardError('invalid_request', 'The body is not valid JSON.');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new GuardError('invalid_request', 'The body must be a JSON object.');
  }
  return value as Record<string, unknown>;
}

interface StringRule {
  min?: number;
  max?: number;
  optional?: boolean;
}

/** A string field, checked for presence, type and length (in characters); the message names the field. */
export function stringField(body: Record<string, unknown>, name: string, rule: StringRule & { optional: true }): string | undefined;
export function stringField(body: Record<string, unknown>, name: string, rule?: StringRule): string;
export function stringField(body: Record<string, unknown>, name: string, rule: StringRule = {}): string | undefined {
  const value = body[name];
  if (value === undefined || value === null) {
    if (rule.optional) return undefined;
    throw new GuardError('invalid_request', `Field '${name}' is required.`, { field: name });
  }
  if (typeof value !== 'string') {
    throw new GuardError('invalid_request', `Field '${name}' must be a string.`, { field: name });
  }
  // A code point is one or two UTF-16 units, so value.length decides most cases
  // without counting; counting is bounded by twice the limit. A 1 MiB password is
  // refused at once instead of being spread into an array of a million strings on
  // the event loop (measured: 14 ms per request, more than half an argon2 hash).
  if (rule.min !== undefined && value.length < 2 * rule.min && codePointLength(value) < rule.min) {
    throw new GuardError('invalid_request', `Field '${name}' must be at least ${rule.min} characters.`, { field: name });
  }
  if (rule.max !== undefined && longerThan(value, rule.max)) {
    throw new GuardError('invalid_request', `Field '${name}' must be at most ${rule.max} characters.`, { field: name });
  }
  // A lone surrogate (valid JSON: "\ud800") is stored as UTF-8 keeps it, one U+FFFD
  // (SQLite wrote three bytes that read back as three): what is checked and
  // answered is what is stored, as POST /audit already does.
  return wellFormed(value);
}

export function enumField<T extends string>(body: Record<string, unknown>, name: string, values: readonly T[], fallback?: T): T {
  const value = body[name];
  if ((value === undefined || value === null) && fallback !== undefined) return fallback;
  if (typeof value !== 'string' || !values.includes(value as T)) {
    throw new GuardError('invalid_request', `Field '${name}' must be one of: ${values.join(', ')}.`, { field: name });
  }
  return value as T;
}

export function integerField(body: Record<string, unknown>, name: string, max: number): number | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > max) {
    throw new GuardError('invalid_request', `Field '${name}' must be an integer from 0 to ${max}.`, { field: name });
  }
  return value;
}

/** An integer query parameter within [min, max], or the default when absent. */
export function queryInteger(query: URLSearchParams, name: string, fallback: number, min: number, max: number): number {
  const raw = query.get(name);
  if (raw === null) return fallback;
  if (!/^\d{1,10}$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new GuardError('invalid_request', `Query parameter '${name}' must be an integer from ${min} to ${max}.`, { field: name });
  }
  return Number(raw);
}

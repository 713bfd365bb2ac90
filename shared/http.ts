// HTTP constants every part of the service agrees on, each defined once: the
// methods the proxy forwards, hop-by-hop fields, status lines, the shapes of ids
// and agent keys. Pure data and pure functions: no transport lives here.
import { STATUS_CODES } from 'node:http';

/** The methods the proxy forwards (CONTRACT.md "Proxy"); any other is 405. */
export const PROXY_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'] as const;
export type ProxyMethod = (typeof PROXY_METHODS)[number];
const PROXY_METHOD_SET: ReadonlySet<string> = new Set(PROXY_METHODS);
export function isProxyMethod(method: string): method is ProxyMethod {
  return PROXY_METHOD_SET.has(method);
}
/** The Allow header of a proxy 405. */
export const PROXY_ALLOW = PROXY_METHODS.join(', ');

/**
 * RFC 9110 §7.6.1: fields that describe one connection, never forwarded by a
 * proxy (plus the Connection header's own list, handled where the head is read).
 * `keep-alive` and `proxy-connection` are the pre-1.1 spellings still seen.
 */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'] as const;

/** Framing the next hop writes itself from the body it gets. */
const FRAMING = ['host', 'content-length'] as const;

/** The agent's own annotations: audited, never sent to the tool. */
export const AGENT_HEADERS = ['x-agent-reasoning', 'x-agent-task-id'] as const;

/** The retry of a held call names its approval with this; the proxy reads it and never forwards it. */
export const APPROVAL_ID_HEADER = 'x-approval-id';

/** Request fields the proxy does not forward upstream (CONTRACT.md "Proxy"). */
export const REQUEST_DROP: ReadonlySet<string> = new Set([...HOP_BY_HOP, ...FRAMING, 'proxy-authorization', 'expect', ...AGENT_HEADERS, APPROVAL_ID_HEADER]);

/**
 * Upstream response fields not passed back: hop-by-hop, what uWS writes itself
 * (length, Date), and `Service-Worker-Allowed`, which would let a tool's script
 * claim a service worker over the whole origin, the console included.
 */
export const RESPONSE_DROP: ReadonlySet<string> = new Set([...HOP_BY_HOP, 'proxy-authenticate', 'content-length', 'date', 'service-worker-allowed']);

/**
 * Added to every upstream response the proxy passes back. A tool's answer is
 * served from the console's origin: opened in a browser, its HTML would run as
 * that origin (read the console's token, register a service worker). Sandboxed,
 * it runs no script and has an opaque origin; agents are not browsers and do
 * not notice. An upstream's own CSP still applies (browsers enforce both).
 */
export const PROXIED_RESPONSE_HEADERS = [['content-security-policy', 'sandbox'], ['x-content-type-options', 'nosniff']] as const;
/** Their bytes in a head, as `name: value\r\n` each. */
export const PROXIED_RESPONSE_HEADER_BYTES = PROXIED_RESPONSE_HEADERS.reduce((n, [k, v]) => n + k.length + v.length + 4, 0);

/** Split mode: fields the admin pass-through neither forwards nor passes back (it sets X-Forwarded-For itself). */
export const PASS_THROUGH_DROP: ReadonlySet<string> = new Set([...HOP_BY_HOP, ...FRAMING, 'x-forwarded-for', 'expect']);

/**
 * Header names a credential may not inject: they would break framing or routing
 * (`Expect`: undici refuses it, so every call to the host would fail), or reach
 * the tool as the agent's or the proxy's own.
 */
export const CREDENTIAL_FORBIDDEN_HEADERS: ReadonlySet<string> = new Set([
  ...HOP_BY_HOP, ...FRAMING, 'proxy-authorization', 'proxy-authenticate', 'expect', ...AGENT_HEADERS, APPROVAL_ID_HEADER,
]);

const STATUS_LINES = new Map<number, string>();
/** `200 OK`: the status line text uWS writes, built once per code. */
export function statusLine(code: number): string {
  let line = STATUS_LINES.get(code);
  if (line === undefined) {
    line = `${code} ${STATUS_CODES[code] ?? 'Unknown'}`;
    if (STATUS_LINES.size < 1000) STATUS_LINES.set(code, line);
  }
  return line;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}

/** Agent API keys: `agk_` + 40 base62 characters (CONTRACT.md "Agents"). */
export const API_KEY_PREFIX = 'agk_';
export const API_KEY_LENGTH = API_KEY_PREFIX.length + 40;
const API_KEY_RE = /^agk_[0-9A-Za-z]{40}$/;
export function isApiKey(value: string): boolean {
  return value.length === API_KEY_LENGTH && API_KEY_RE.test(value);
}

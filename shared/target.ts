// What a proxied call names, normalised once, so that the proxy, the policy
// check API and the credential store read one spelling of every target: the
// authority (host, port), the hostname a policy sees as its tool, and the path a
// policy sees. Pure functions over strings, shared by the proxy and admin wings.
import { isIPv4 } from 'node:net';

export interface ParsedTarget {
  /** Normalized host as it appears in a URL: lower-case DNS name, dotted-quad IPv4, or bracketed IPv6. */
  host: string;
  /** 1–65535; 443 when the request names none. */
  port: number;
  /** `host` when the port is 443, else `host:port`. Key of the stored credential and the upstream Host header. */
  authority: string;
  /** `host` without IPv6 brackets: the policy's tool name. */
  hostname: string;
  /** Target path as the agent sent it (never decoded or dot-normalized), always starting with `/`. */
  path: string;
}


const DEFAULT_PORT = 443;
// RFC 1035 §2.3.4. Underscore is outside LDH but occurs in real DNS names and
// the WHATWG parser accepts it, so it is let through; anything else is refused.
const MAX_NAME_LENGTH = 253;
const MAX_LABEL_LENGTH = 63;
const DNS_LABEL = /^[a-z0-9_-]+$/;
const BRACKETED_AUTHORITY = /^\[([0-9A-Fa-f:.]+)\](?::([0-9]{1,5}))?$/;
const NAMED_AUTHORITY = /^([A-Za-z0-9._-]+)(?::([0-9]{1,5}))?$/;

/**
 * Splits what follows `/proxy/{key}/` into the target's authority and path.
 * Returns null for every target the proxy answers with 400 `invalid_target`.
 */
export function parseTarget(rest: string): ParsedTarget | null {
  const slash = rest.indexOf('/');
  const authorityPart = slash === -1 ? rest : rest.slice(0, slash);
  const path = slash === -1 ? '/' : rest.slice(slash);
  // Agents call few distinct hosts: the authority's parse (regexes, the WHATWG
  // parser) is remembered, bounded, so the hot path pays it once per host.
  let authority = AUTHORITIES.get(authorityPart);
  if (authority === undefined) {
    authority = parseAuthority(authorityPart);
    if (AUTHORITIES.size >= MAX_REMEMBERED_AUTHORITIES) AUTHORITIES.clear();
    AUTHORITIES.set(authorityPart, authority);
  }
  if (authority === null) return null;
  // A literal, not `{ ...authority, path }`: V8 made a new hidden class for each
  // spread-and-extend (a map and its descriptors, garbage a moment later): 620 →
  // ~90 ns a call (bench/micro/parse-target.ts, parseTarget).
  return { host: authority.host, port: authority.port, authority: authority.authority, hostname: authority.hostname, path };
}

/**
 * A `host[:port]` as the proxy keys credentials (the target's `authority`):
 * lower case, default port dropped, IPv4 shorthand and IPv6 compressed, one
 * trailing dot dropped. Null when it is anything else (a scheme, a path,
 * userinfo, a bad port). The credential store and the proxy use this one
 * function, so a stored hostname and a target can never disagree.
 */
/** The host of a normalised authority: `[::1]:8443` → `[::1]`, `api.example.com:8443` → `api.example.com`. */
export function hostOfAuthority(authority: string): string {
  const colon = authority.lastIndexOf(':');
  return colon === -1 || authority.endsWith(']') ? authority : authority.slice(0, colon);
}

/**
 * A credential's hostname, normalised as the proxy reads a target's host, with
 * the port kept when one is written, 443 included: `api.example.com:443`
 * matches port 443 only (CONTRACT.md, Clarifications), where the target
 * `api.example.com` is the same port unwritten (findCredentialForHost).
 */
export function normalizeCredentialHostname(raw: string): string | null {
  const input = raw.trim();
  if (input.length === 0 || input.length > 260) return null;
  const parsed = parseAuthority(input);
  if (parsed === null) return null;
  const portWritten = input.startsWith('[') ? input.includes(']:') : input.includes(':');
  return portWritten ? `${parsed.host}:${parsed.port}` : parsed.host;
}

/** A target authority's default port written out: `api.example.com` → `api.example.com:443`; one with a port is as it is. */
export function withDefaultPort(authority: string): string {
  return hostOfAuthority(authority) === authority ? `${authority}:${DEFAULT_PORT}` : authority;
}

type ParsedAuthority = Omit<ParsedTarget, 'path'>;
const AUTHORITIES = new Map<string, ParsedAuthority | null>();
const MAX_REMEMBERED_AUTHORITIES = 10_000;

function parseAuthority(authorityPart: string): ParsedAuthority | null {
  // The character classes below already exclude `@` (userinfo), `%`
  // (percent-encoding, IPv6 zone ids), `\` (which the WHATWG parser would read
  // as `/`) and non-ASCII (agents send IDNs as punycode).
  const match = BRACKETED_AUTHORITY.exec(authorityPart) ?? NAMED_AUTHORITY.exec(authorityPart);
  if (match === null) return null;
  const rawHost = authorityPart.startsWith('[') ? `[${match[1]}]` : match[1];
  const rawPort = match[2];

  let port = DEFAULT_PORT;
  if (rawPort !== undefined) {
    port = Number(rawPort);
    if (port < 1 || port > 65535) return null;
  }

  // The WHATWG parser lower-cases, turns IPv4 shorthand (`127.1`, `2130706433`,
  // `0x7f.0.0.1`, `0177.0.0.1`) into a dotted quad and compresses IPv6, so
  // policy, allow-list and credential lookup all see one spelling per address.
  let parsed: string;
  try {
    parsed = new URL(`https://${rawHost}/`).hostname;
  } catch {
    return null;
  }

  let host: string;
  let hostname: string;
  const mapped = parsed.startsWith('[::ffff:') ? ipv4OfMapped(parsed) : null;
  if (mapped !== null) {
    // `[::ffff:127.0.0.1]` (the URL parser writes `[::ffff:7f00:1]`) is a socket
    // to 127.0.0.1: the policy, the allow-list and the credential lookup see
    // that address, so a rule for it cannot be stepped around with this spelling.
    host = mapped;
    hostname = mapped;
  } else if (parsed.startsWith('[')) {
    host = parsed;
    hostname = parsed.slice(1, -1);
  } else if (isIPv4(parsed)) {
    host = parsed;
    hostname = parsed;
  } else {
    // `api.github.com.` names the same host as `api.github.com`; one trailing
    // dot is dropped so a policy rule for the name cannot be stepped around.
    const name = canonicalHostname(parsed);
    if (!isDnsName(name)) return null;
    host = name;
    hostname = name;
  }

  const authority = port === DEFAULT_PORT ? host : `${host}:${port}`;
  return { host, port, authority, hostname };
}

/** A tool name as the proxy reads it now: one recorded as an IPv4-mapped IPv6 address (`::ffff:7f00:1`, before 2026-11-29) is its IPv4 address. */
export function currentToolName(toolName: string): string {
  return toolName.startsWith('::ffff:') ? ipv4OfMapped(`[${toolName}]`) ?? toolName : toolName;
}

/** The dotted quad of an IPv4-mapped IPv6 address as the URL parser writes it (`[::ffff:7f00:1]`), else null. */
function ipv4OfMapped(bracketed: string): string | null {
  const m = /^\[::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/.exec(bracketed);
  if (m === null) return null;
  const high = parseInt(m[1]!, 16);
  const low = parseInt(m[2]!, 16);
  return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
}

export function isDnsName(name: string): boolean {
  if (name.length === 0 || name.length > MAX_NAME_LENGTH) return false;
  for (const label of name.split('.')) {
    if (label.length === 0 || label.length > MAX_LABEL_LENGTH || !DNS_LABEL.test(label)) return false;
  }
  return true;
}

/**
 * One spelling of a host name: lower case, IPv6 brackets off, one trailing dot
 * dropped (`api.github.com.` names the same host as `api.github.com`, and a rule
 * for the name must not be stepped around with it).
 */
export function canonicalHostname(hostname: string): string {
  let name = hostname.toLowerCase();
  if (name.startsWith('[') && name.endsWith(']')) name = name.slice(1, -1);
  if (name.endsWith('.')) name = name.slice(0, -1);
  return name;
}

const ESCAPE = /%([0-9A-Fa-f]{2})/g;
/**
 * Decoded in a policy path: unreserved characters, '/', and the rest of RFC
 * 3986's pchar but '*' (sub-delims, ':' and '@'). Servers that route on the
 * decoded path (Go's URL.Path, WSGI's PATH_INFO, Spring, Rails) read `%40` as
 * `@` and `%3A` as `:`: a deny rule on `/@acme/**` or `/users/me:delete` was
 * stepped around with either escaped. '*' is the one left escaped: in a glob it
 * is the wildcard, `%2A` a literal star.
 */
const DECODED_IN_PATH = /[A-Za-z0-9\-._~/!$&'()+,;=:@]/;
/** An escaped backslash: refused in a target path, as a raw one and '#' are (normalizePolicyPath). */
const ESCAPED_BACKSLASH = /%5[Cc]/;

/** What normalizePolicyPath refuses, for the answers that say so (the proxy's, the policy check's). */
export const REFUSED_PATH_PARTS = "dot segments (. or .., also with ';' parameters), a '#' or a backslash";

/**
 * The path the policy sees: percent-escapes of pchar characters but '*' and of
 * '/' decoded (DECODED_IN_PATH; for unreserved ones RFC 3986 §6.2.2.2), so
 * `/%61dmin` and `/admin%2Fx` meet a rule on `/admin/**` the way an upstream
 * that decodes them would, characters a client can send only escaped (a space,
 * non-ASCII) escaped as it would (encodePathChars), and runs of '/' collapse
 * (`//admin` is `/admin` to most servers). In a call's path (not a glob's) a
 * raw '*' is `%2A`: one spelling of a literal star. The upstream still gets the
 * path exactly as sent. Null when a segment is `.` or `..` (raw or encoded, or
 * with `;` parameters after it), or the path holds a `#` or a backslash (raw or
 * `%5C`): such paths mean different things to different servers, so they are
 * refused rather than guessed at. A policy would see `/admin#x` or
 * `/x\..\admin` as a path of its own, while a server that reads URLs as
 * browsers do (WHATWG URL: Node's `new URL`, Deno, Bun, Hono) routes `/admin` (a
 * fragment cut off; a backslash a slash), and some servers decode `%5C` into one.
 */
export function normalizePolicyPath(path: string, glob = false): string | null {
  // includes() first: a regular expression on every call cost ~30 ns more.
  if (path.includes('#') || path.includes('\\') || (path.includes('%') && ESCAPED_BACKSLASH.test(path))) return null;
  path = encodePathChars(path);
  if (!glob && path.includes('*')) path = path.replaceAll('*', '%2A');
  const decoded = path.includes('%')
    ? path.replace(ESCAPE, (escape, hex: string) => {
      const char = String.fromCharCode(parseInt(hex, 16));
      return DECODED_IN_PATH.test(char) ? char : escape.toUpperCase();
    })
    : path;
  const collapsed = decoded.includes('//') ? decoded.replace(/\/{2,}/g, '/') : decoded;
  if (collapsed.includes('/.')) {
    for (const segment of collapsed.split('/')) {
      // `..;x` is `..` to a Java servlet container (Tomcat drops a segment's
      // `;` parameters): `/public/..;/admin` would reach /admin past a rule on it.
      if (segment === '.' || segment === '..' || segment.startsWith('.;') || segment.startsWith('..;')) return null;
    }
  }
  return collapsed;
}

/** A character a request line carries only percent-encoded: outside RFC 3986's pchar, '/', and '%' itself. */
const NOT_PATH_CHAR = /[^A-Za-z0-9\-._~!$&'()*+,;=:@/%]/u;
const NOT_PATH_CHARS = new RegExp(NOT_PATH_CHAR.source, 'gu');

/**
 * A path as an HTTP client puts it on the wire: each character it cannot send
 * raw (a space, a non-ASCII letter) percent-encoded as UTF-8 (upper-case hex).
 * So a policy rule or a policy check written with `my report.pdf` speaks of
 * the call the proxy sees as `my%20report.pdf`.
 */
export function encodePathChars(path: string): string {
  // One RegExp test: ~22 ns on a short path (a table scan in JS measured slower; bench/micro/parse-target.ts).
  return NOT_PATH_CHAR.test(path) ? path.replace(NOT_PATH_CHARS, percentEncode) : path;
}

/** Each UTF-8 byte of `char` as %XX (a lone surrogate as U+FFFD's, where encodeURIComponent throws). */
function percentEncode(char: string): string {
  let out = '';
  for (const byte of Buffer.from(char, 'utf8')) out += `%${byte < 16 ? '0' : ''}${byte.toString(16).toUpperCase()}`;
  return out;
}

/** What a policy is evaluated on: the tool (hostname, no port) and the normalised path. */
export interface PolicyInputs {
  tool: string;
  path: string;
}

/**
 * The policy's inputs for a call to `tool` (a host with an optional port) and
 * `path` (optional; a query string after `?` is not part of it), derived exactly
 * as the proxy derives them from `/proxy/{key}/{tool}{path}`: so the policy
 * check API and the proxy can never disagree on one call. A string names what
 * is wrong with the input ('tool' or 'path') when the proxy would refuse it as
 * `invalid_target`. Without a path, rules that name one do not match ('').
 */
export function policyInputs(tool: string, path: string | undefined): PolicyInputs | 'tool' | 'path' {
  if (tool.includes('/')) return 'tool';
  const target = parseTarget(`${tool}/`);
  if (target === null) return 'tool';
  if (path === undefined) return { tool: target.hostname, path: '' };
  const query = path.indexOf('?');
  const policyPath = normalizePolicyPath(query < 0 ? path : path.slice(0, query));
  return policyPath === null ? 'path' : { tool: target.hostname, path: policyPath };
}

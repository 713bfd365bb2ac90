// URL references an upstream's answer hands the agent (Location, Content-Location,
// Link, Refresh): a relative one is the upstream's, but the agent's client
// resolves it against the guard's URL, /proxy/{key}/{authority}/{path}. There
// `../../api.github.com/user` climbs out of the tool's prefix into another
// tool's, which the guard then calls with that tool's stored credential: a tool
// (hostile, or with an open redirect) would pick calls made to another. A
// relative reference is resolved against the upstream URL it came from, as the
// upstream means it, and put back under the tool's prefix; an absolute one is
// left as it is. It is written as an absolute path, `/proxy/{key}/{authority}/...`,
// the key and all: a form relative to the call's URL (`../next`) would keep
// the key out of logged links, but clients resolve against different bases
// (the URL first opened, before a redirect: the MCP SDKs' endpoint) and some
// drop empty segments of the base (Python's urljoin), and either way a
// relative form climbs into another tool's prefix. Every scan here is linear
// in the header (up to 64 KiB from any upstream): no regular expression with
// quantifiers that can match the same text.
import { isUtf8 } from 'node:buffer';

/** A URI's scheme (RFC 3986 §3.1) and its colon. */
const SCHEME = /^[a-z][a-z0-9+.-]*:/i;
/** WHATWG URL's special schemes: `https:../x` (no `//` after it) is relative to a base of the same scheme. */
const SPECIAL_SCHEMES: ReadonlySet<string> = new Set(['http:', 'https:', 'ws:', 'wss:', 'ftp:', 'file:']);
/** Refresh's `url=` after the delay's separator. */
const REFRESH_URL_KEY = /^[ \t]*url[ \t]*=[ \t]*/i;

/**
 * `ref` as the upstream at `base` means it, written for a client that resolves it
 * against the guard: same origin, the tool's prefix and the resolved path; an
 * origin of its own (`//host/x`, `\\host/x`), the absolute URL, or with
 * `otherOrigin` 'root' the tool's root, `{prefix}/` (where a client must not
 * leave the guard). An empty or absolute reference is returned as it is.
 */
export function rebaseReference(ref: string, base: string, prefix: string, otherOrigin: 'absolute' | 'root' = 'absolute'): string {
  // URL parsers drop leading and trailing C0 controls and spaces, and tabs and newlines anywhere.
  let start = 0;
  let end = ref.length;
  while (start < end && ref.charCodeAt(start) <= 0x20) start++;
  while (end > start && ref.charCodeAt(end - 1) <= 0x20) end--;
  if (start === end) return ref;
  let text = ref.slice(start, end);
  if (text.includes('\t') || text.includes('\n') || text.includes('\r')) text = text.replace(/[\t\n\r]/g, '');
  const scheme = SCHEME.exec(text);
  // Absolute: a scheme of its own, or a special one with an authority (`//`, or
  // `\\` as a WHATWG parser reads it, which Python's urljoin does not: such a
  // one is written as WHATWG reads it, below). A special scheme without one
  // (`https:../x`, `http:/proxy/...`) is relative to a client whose URL has
  // that scheme: it is resolved as the upstream means it, like any relative
  // reference. Where the client must not leave the guard ('root'), nothing is
  // passed as it came.
  let absolute = false;
  if (scheme !== null && (!SPECIAL_SCHEMES.has(scheme[0].toLowerCase()) || isSlash(text, scheme[0].length) && isSlash(text, scheme[0].length + 1))) {
    if (otherOrigin === 'absolute' && !text.includes('\\')) return ref;
    absolute = true;
  }
  // A header's bytes come as Latin-1: UTF-8 ones are read as the client reads them.
  if (hasHighByte(text)) {
    const bytes = Buffer.from(text, 'latin1');
    if (isUtf8(bytes)) text = bytes.toString('utf8');
  }
  let url: URL;
  try {
    url = new URL(text, base);
  } catch {
    // Not a URL to a WHATWG parser against the upstream's URL; another base (the
    // guard's, of another scheme) or another parser may read it as relative.
    return `${prefix}/`;
  }
  if (absolute && otherOrigin === 'absolute') return url.href;
  if (url.origin !== new URL(base).origin) return otherOrigin === 'root' ? `${prefix}/` : url.href;
  return `${prefix}${url.pathname}${url.search}${url.hash}`;
}

/** `text[i]` is `/` or `\\` (the same to a URL parser after a special scheme). */
function isSlash(text: string, i: number): boolean {
  const c = text.charCodeAt(i);
  return c === 47 || c === 92;
}

function hasHighByte(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return true;
  return false;
}

/**
 * A response header's value with its relative references rebased (above);
 * `name` lower-case, one of location, content-location, link, refresh. A value
 * that does not parse as its header's syntax is returned as it is.
 */
export function rebaseHeader(name: string, value: string, base: string, prefix: string): string {
  if (name === 'link') return rebaseLink(value, base, prefix);
  if (name === 'refresh') return rebaseRefresh(value, base, prefix);
  return rebaseReference(value, base, prefix);
}

/** Link (RFC 8288): `<target>` then parameters (quoted strings may hold `<`, `>` and commas), comma-separated. */
function rebaseLink(value: string, base: string, prefix: string): string {
  let out = '';
  let i = 0;
  const n = value.length;
  while (i < n) {
    let j = i;
    while (j < n && (value[j] === ' ' || value[j] === '\t' || value[j] === ',')) j++;
    out += value.slice(i, j);
    i = j;
    if (i >= n) break;
    if (value[i] !== '<') return value;
    const close = value.indexOf('>', i + 1);
    if (close === -1) return value;
    out += `<${rebaseReference(value.slice(i + 1, close), base, prefix)}>`;
    i = close + 1;
    let quoted = false;
    for (j = i; j < n; j++) {
      const c = value[j];
      if (quoted) {
        if (c === '\\') j++;
        else if (c === '"') quoted = false;
      } else if (c === '"') {
        quoted = true;
      } else if (c === ',') {
        break;
      }
    }
    out += value.slice(i, j);
    i = j;
  }
  return out;
}

/** Refresh: `N; url=reference` (or `N, url=...`; the reference may be quoted and runs to the end). */
function rebaseRefresh(value: string, base: string, prefix: string): string {
  let sep = -1;
  for (let i = 0; i < value.length; i++) {
    if (value[i] === ';' || value[i] === ',') {
      sep = i;
      break;
    }
  }
  if (sep === -1) return value;
  const key = REFRESH_URL_KEY.exec(value.slice(sep + 1));
  if (key === null) return value;
  const head = value.slice(0, sep + 1 + key[0].length);
  let ref = value.slice(head.length);
  let quote = '';
  const first = ref[0];
  if ((first === '"' || first === "'") && ref.length >= 2 && ref.endsWith(first)) {
    quote = first;
    ref = ref.slice(1, -1);
  }
  return `${head}${quote}${rebaseReference(ref, base, prefix)}${quote}`;
}

/**
 * A Set-Cookie the upstream sends, scoped to the tool's prefix: its Path put
 * under `prefix` (`Path=/docs` → `Path=/proxy/{key}/{authority}/docs`), and its
 * Domain dropped (the cookie belongs to the guard's host alone). Without a Path
 * (or with one that is not a path), the default the upstream's browser would
 * take from `upstreamPath` (RFC 6265 §5.1.4), under the prefix: the browser's
 * own default, from the guard's URL, is `/proxy/{key}` for a target without a
 * path, every tool of the key. As the upstream wrote it, `Path=/` put the
 * cookie on every request a browser makes to the guard: the console and the
 * admin API (a few large cookies locked them out with 431) and every other
 * tool's prefix.
 */
export function scopeSetCookie(value: string, prefix: string, upstreamPath: string): string {
  const parts = value.split(';');
  let out = parts[0]!;
  let path: string | null = null;
  for (let i = 1; i < parts.length; i++) {
    const attribute = parts[i]!.trim();
    if (attribute === '') continue;
    const eq = attribute.indexOf('=');
    const name = (eq < 0 ? attribute : attribute.slice(0, eq)).trim().toLowerCase();
    if (name === 'domain') continue;
    if (name === 'path') {
      const given = eq < 0 ? '' : attribute.slice(eq + 1).trim();
      path = given.startsWith('/') ? given : null; // the last Path stands, as in a browser
      continue;
    }
    out += `; ${attribute}`;
  }
  return `${out}; Path=${prefix}${path ?? defaultCookiePath(upstreamPath)}`;
}

/** RFC 6265 §5.1.4: the directory of a request's path (without its query), `/` at the top. */
function defaultCookiePath(requestPath: string): string {
  const query = requestPath.indexOf('?');
  const path = query < 0 ? requestPath : requestPath.slice(0, query);
  const last = path.lastIndexOf('/');
  return last <= 0 ? '/' : path.slice(0, last);
}

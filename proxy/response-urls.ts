// URL references an upstream's answer hands the agent (Location, Content-Location,
// Link, Refresh; the MCP SSE endpoint event): a relative one is the upstream's,
// but the agent's client resolves it against the guard's URL,
// /proxy/{key}/{authority}/{path}. There `../../api.github.com/user` climbs out of
// the tool's prefix into another tool's, which the guard then calls with that
// tool's stored credential: a tool (hostile, or with an open redirect) would pick
// calls made to another. A relative reference is resolved against the upstream
// URL it came from, as the upstream means it, and put back under the tool's
// prefix; an absolute one is left as it is.

/** A URI with a scheme (RFC 3986 §3.1): absolute, not resolved against anything of ours. */
const HAS_SCHEME = /^[a-z][a-z0-9+.-]*:/i;

/**
 * `ref` as the upstream at `base` means it, written for a client that resolves it
 * against the guard: same origin, the tool's prefix and the resolved path; an
 * origin of its own (`//host/x`, `\\host/x`), the absolute URL.
 */
export function rebaseReference(ref: string, base: string, prefix: string): string {
  // Leading and trailing C0 controls and spaces are dropped by URL parsers; a scheme after them is still a scheme.
  const trimmed = ref.replace(/^[\x00-\x20]+|[\x00-\x20]+$/g, '');
  if (HAS_SCHEME.test(trimmed.replace(/[\t\n\r]/g, ''))) return ref;
  let url: URL;
  try {
    url = new URL(trimmed, base);
  } catch {
    return ref;
  }
  const origin = new URL(base).origin;
  if (url.origin !== origin) return url.href;
  return `${prefix}${url.pathname}${url.search}${url.hash}`;
}

/** Link: each `<uri-reference>` (RFC 8288). */
const LINK_TARGET = /<([^>]*)>/g;
/** Refresh: `N; url=uri-reference` (the URL runs to the end; quotes are taken off). */
const REFRESH_URL = /^(\s*\d*[^;,]*[;,]\s*url\s*=\s*)(['"]?)(.*?)\2\s*$/i;

/**
 * A response header's value with its relative references rebased (above);
 * `name` lower-case, one of location, content-location, link, refresh.
 */
export function rebaseHeader(name: string, value: string, base: string, prefix: string): string {
  if (name === 'link') return value.replace(LINK_TARGET, (_m, ref: string) => `<${rebaseReference(ref, base, prefix)}>`);
  if (name === 'refresh') {
    const m = REFRESH_URL.exec(value);
    return m === null ? value : `${m[1]}${m[2]}${rebaseReference(m[3]!, base, prefix)}${m[2]}`;
  }
  return rebaseReference(value, base, prefix);
}

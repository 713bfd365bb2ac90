// The SSRF rules over the addresses a target resolves to: which ranges are
// refused, and the allow-list that opens chosen hosts and CIDRs.
//
// Pure functions over strings: nothing here resolves a name or opens a socket.
// The guard stage (guard-target.ts) resolves the hostname, runs every resolved
// address through `classifyAddress`, consults the allow-list, and connects to
// the address it checked (no DNS rebinding between check and connect).
import { isIPv4, isIPv6 } from 'node:net';
import { ipBytes } from '../shared/ip.js';
import { canonicalHostname, isDnsName } from '../shared/target.js';

export type AddressRefusal =
  | 'invalid'
  | 'unspecified'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'cgnat'
  | 'multicast'
  | 'broadcast'
  | 'reserved'
  | 'documentation'
  | 'benchmarking'
  | 'nat64'
  | '6to4'
  | 'teredo'
  | 'unique-local';

export interface AllowList {
  /** True when a hostname entry names this host (exactly, or as a `*.suffix` entry). */
  allowsHost(hostname: string): boolean;
  /** True when an IP or CIDR entry covers this address (IPv4 and its IPv4-mapped IPv6 form alike). */
  allowsAddress(ip: string): boolean;
}

// ---------------------------------------------------------------------------
// Addresses. Every address is held as 16 bytes; an IPv4 address a.b.c.d is
// held as its IPv4-mapped form ::ffff:a.b.c.d (RFC 4291 §2.5.5.2), so an IPv4
// rule covers both spellings of the same destination.

interface Prefix {
  bytes: Uint8Array;
  bits: number;
}

const MAPPED_PREFIX_BITS = 96;

function refusalTable(rows: ReadonlyArray<readonly [string, AddressRefusal]>): ReadonlyArray<readonly [Prefix, AddressRefusal]> {
  return rows.map(([cidr, reason]) => [parseCidr(cidr), reason] as const);
}

/** Refused IPv4 ranges (IANA IPv4 Special-Purpose Address Registry, RFC 6890). */
const IPV4_REFUSALS = refusalTable([
  ['0.0.0.0/8', 'unspecified'], // RFC 1122 §3.2.1.3 "this network"
  ['10.0.0.0/8', 'private'], // RFC 1918
  ['100.64.0.0/10', 'cgnat'], // RFC 6598
  ['127.0.0.0/8', 'loopback'], // RFC 1122
  ['169.254.0.0/16', 'link-local'], // RFC 3927; cloud metadata lives here
  ['172.16.0.0/12', 'private'], // RFC 1918
  ['192.0.0.0/24', 'reserved'], // RFC 6890 IETF protocol assignments
  ['192.0.2.0/24', 'documentation'], // RFC 5737 TEST-NET-1
  ['192.88.99.0/24', '6to4'], // RFC 7526 deprecated 6to4 relay anycast
  ['192.168.0.0/16', 'private'], // RFC 1918
  ['198.18.0.0/15', 'benchmarking'], // RFC 2544
  ['198.51.100.0/24', 'documentation'], // RFC 5737 TEST-NET-2
  ['203.0.113.0/24', 'documentation'], // RFC 5737 TEST-NET-3
  ['224.0.0.0/4', 'multicast'], // RFC 5771
  ['255.255.255.255/32', 'broadcast'], // RFC 919; before 240/4 so it is named
  ['240.0.0.0/4', 'reserved'], // RFC 1112
]);

/**
 * Refused IPv6 ranges (IANA IPv6 Special-Purpose Address Registry). The
 * IPv4-mapped range ::ffff:0:0/96 is not here: its embedded IPv4 address is
 * classified instead. After these, anything outside 2000::/3 (the only block
 * IANA allocates for global unicast) is refused as 'reserved'.
 */
const IPV6_REFUSALS = refusalTable([
  ['::/128', 'unspecified'], // RFC 4291
  ['::1/128', 'loopback'], // RFC 4291
  ['::/96', 'reserved'], // RFC 4291 §2.5.5.1 deprecated IPv4-compatible
  ['64:ff9b::/96', 'nat64'], // RFC 6052
  ['64:ff9b:1::/48', 'nat64'], // RFC 8215
  ['100::/64', 'reserved'], // RFC 6666 discard-only
  ['2001::/32', 'teredo'], // RFC 4380
  ['2001:2::/48', 'benchmarking'], // RFC 5180
  ['2001::/23', 'reserved'], // RFC 2928 IETF protocol assignments
  ['2001:db8::/32', 'documentation'], // RFC 3849
  ['2002::/16', '6to4'], // RFC 3056
  ['3fff::/20', 'documentation'], // RFC 9637
  ['fc00::/7', 'unique-local'], // RFC 4193
  ['fe80::/10', 'link-local'], // RFC 4291
  ['ff00::/8', 'multicast'], // RFC 4291
]);

const GLOBAL_UNICAST = parseCidr('2000::/3');
const IPV4_MAPPED = parseCidr('::ffff:0:0/96');

/**
 * Why the proxy must not connect to this IP literal (v4 or v6, no brackets),
 * or null when it is a public unicast address. Not an IP literal → 'invalid'.
 */
export function classifyAddress(ip: string): AddressRefusal | null {
  const bytes = ipBytes(ip);
  if (bytes === null) return 'invalid';
  if (inPrefix(bytes, IPV4_MAPPED)) {
    for (const [prefix, reason] of IPV4_REFUSALS) if (inPrefix(bytes, prefix)) return reason;
    return null;
  }
  for (const [prefix, reason] of IPV6_REFUSALS) if (inPrefix(bytes, prefix)) return reason;
  return inPrefix(bytes, GLOBAL_UNICAST) ? null : 'reserved';
}

/**
 * The SSRF allow-list from `GUARD_ALLOW_TARGETS`. Entries: a hostname
 * (`api.internal`), a suffix (`*.internal`: every name below `internal`, not
 * `internal` itself), an IP literal (`127.0.0.1`, `::1`) or a CIDR
 * (`10.0.0.0/8`, `fd00::/8`). Throws on a malformed entry so the service
 * refuses to start with a configuration it would misread.
 *
 * A host allowed by name is trusted whole: the guard lets through every
 * address that name resolves to, whatever classifyAddress says of it. That is
 * what an operator who lists `metadata.internal` means, and it also means the
 * name's DNS is trusted; list addresses or CIDRs instead to trust less.
 */
export function createAllowList(entries: readonly string[]): AllowList {
  const exactHosts = new Set<string>();
  const hostSuffixes: string[] = [];
  const prefixes: Prefix[] = [];

  for (const raw of entries) {
    const entry = raw.trim().toLowerCase();
    if (entry.length === 0) throw new Error('GUARD_ALLOW_TARGETS: empty entry');
    if (entry.includes('/')) {
      prefixes.push(parseCidrEntry(entry));
    } else if (isIPv4(entry) || isIPv6(entry)) {
      const bytes = ipBytes(entry);
      if (bytes === null) throw new Error(`GUARD_ALLOW_TARGETS: "${raw}" is not a valid IP address`);
      prefixes.push({ bytes, bits: 128 });
    } else if (entry.startsWith('*.')) {
      hostSuffixes.push('.' + parseHostEntry(entry.slice(2), raw));
    } else {
      exactHosts.add(parseHostEntry(entry, raw));
    }
  }

  return {
    allowsHost(hostname: string): boolean {
      const name = canonicalHostname(hostname);
      if (exactHosts.has(name)) return true;
      for (const suffix of hostSuffixes) if (name.endsWith(suffix)) return true;
      return false;
    },
    allowsAddress(ip: string): boolean {
      const bytes = ipBytes(ip);
      if (bytes === null) return false;
      for (const prefix of prefixes) if (inPrefix(bytes, prefix)) return true;
      return false;
    },
  };
}

function parseHostEntry(name: string, raw: string): string {
  if (name.includes(':')) {
    throw new Error(`GUARD_ALLOW_TARGETS: "${raw}" has a port or is not a valid IP; entries name hosts, not ports`);
  }
  const bare = canonicalHostname(name);
  if (!isDnsName(bare)) throw new Error(`GUARD_ALLOW_TARGETS: "${raw}" is not a valid hostname`);
  // A last label of digits makes the URL parser read the name as an IPv4
  // address (`127.1`), so a target could never match this entry by name.
  const last = bare.slice(bare.lastIndexOf('.') + 1);
  if (/^(?:[0-9]+|0x[0-9a-f]*)$/.test(last)) {
    throw new Error(`GUARD_ALLOW_TARGETS: "${raw}" is neither a hostname nor a dotted-quad IPv4 address`);
  }
  return bare;
}

function parseCidrEntry(entry: string): Prefix {
  let prefix: Prefix;
  try {
    prefix = parseCidr(entry);
  } catch (error) {
    throw new Error(`GUARD_ALLOW_TARGETS: "${entry}" ${(error as Error).message}`);
  }
  return prefix;
}

/**
 * Parses `address/bits` into a 16-byte prefix (IPv4 as its mapped form, bits
 * + 96). Throws on a bad address, a bad length, or host bits set past the
 * length (`10.0.0.1/8` is more likely a typo than an intent).
 */
function parseCidr(cidr: string): Prefix {
  const slash = cidr.indexOf('/');
  const address = cidr.slice(0, slash);
  const length = cidr.slice(slash + 1);
  const bytes = ipBytes(address);
  if (slash === -1 || bytes === null) throw new Error('is not a CIDR: the address before "/" is not a valid IP');
  const max = isIPv4(address) ? 32 : 128;
  if (!/^[0-9]{1,3}$/.test(length) || Number(length) > max) {
    throw new Error(`is not a CIDR: the prefix length must be 0–${max}`);
  }
  const bits = Number(length) + (max === 32 ? MAPPED_PREFIX_BITS : 0);
  for (let bit = bits; bit < 128; bit++) {
    if ((bytes[bit >> 3]! >> (7 - (bit & 7))) & 1) throw new Error('has bits set after the prefix length');
  }
  return { bytes, bits };
}

function inPrefix(bytes: Uint8Array, prefix: Prefix): boolean {
  const whole = prefix.bits >> 3;
  for (let i = 0; i < whole; i++) if (bytes[i] !== prefix.bytes[i]) return false;
  const rest = prefix.bits & 7;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return (bytes[whole]! & mask) === (prefix.bytes[whole]! & mask);
}

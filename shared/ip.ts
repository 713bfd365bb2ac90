// IP literals as bytes, for the SSRF rules (proxy/ssrf-rules.ts) and the login
// limiter's client networks (admin/auth.ts).
import { isIPv4, isIPv6 } from 'node:net';

/**
 * 16 bytes for an IP literal; IPv4 as ::ffff:a.b.c.d. Null for anything else,
 * including IPv6 zone ids (`fe80::1%eth0`), which name no public destination.
 * node:net validates the text (compressed, upper-case and embedded dotted-quad
 * IPv6 forms; dotted-quad IPv4 without leading zeros); this only decodes it.
 */
export function ipBytes(ip: string): Uint8Array | null {
  const bytes = new Uint8Array(16);
  if (isIPv4(ip)) {
    bytes[10] = 0xff;
    bytes[11] = 0xff;
    writeIPv4(ip, bytes, 12);
    return bytes;
  }
  if (!isIPv6(ip) || ip.includes('%')) return null;

  // Rewrite a trailing dotted quad (`::ffff:1.2.3.4`) as two hex groups.
  let text = ip;
  const lastColon = text.lastIndexOf(':');
  const embedded = text.slice(lastColon + 1);
  if (embedded.includes('.')) {
    const quad = new Uint8Array(4);
    writeIPv4(embedded, quad, 0);
    const high = ((quad[0]! << 8) | quad[1]!).toString(16);
    const low = ((quad[2]! << 8) | quad[3]!).toString(16);
    text = `${text.slice(0, lastColon + 1)}${high}:${low}`;
  }
  const halves = text.split('::');
  const head = halves[0] === '' ? [] : halves[0]!.split(':');
  const back = halves[1] === undefined || halves[1] === '' ? [] : halves[1].split(':');
  const zeros = halves.length === 2 ? 8 - head.length - back.length : 0;
  const groups = [...head, ...Array<string>(Math.max(zeros, 0)).fill('0'), ...back];
  if (groups.length !== 8) return null;
  groups.forEach((group, i) => {
    const value = parseInt(group, 16);
    bytes[i * 2] = value >> 8;
    bytes[i * 2 + 1] = value & 0xff;
  });
  return bytes;
}

function writeIPv4(ip: string, into: Uint8Array, at: number): void {
  const parts = ip.split('.');
  for (let i = 0; i < 4; i++) into[at + i] = Number(parts[i]);
}

/**
 * The network a client address is counted under: an IPv4 address itself
 * (also when written IPv4-mapped, `::ffff:a.b.c.d`), an IPv6 address by its /64,
 * the smallest block a single subscriber is usually given (RFC 6177), so one
 * client cannot rotate through its 2^64 addresses for fresh counters.
 * Text that is no IP literal is returned as is.
 */
export function clientNetwork(address: string): string {
  const bytes = ipBytes(address);
  if (bytes === null) return address;
  if (isIPv4Mapped(bytes)) return `${bytes[12]}.${bytes[13]}.${bytes[14]}.${bytes[15]}`;
  const groups: string[] = [];
  for (let i = 0; i < 8; i += 2) groups.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  return `${groups.join(':')}::/64`;
}

/** 127.0.0.0/8 (also written IPv4-mapped) or ::1: an address only this machine reaches. */
export function isLoopbackAddress(address: string): boolean {
  const bytes = ipBytes(address);
  if (bytes === null) return false;
  if (isIPv4Mapped(bytes)) return bytes[12] === 127;
  return bytes.subarray(0, 15).every((b) => b === 0) && bytes[15] === 1;
}

/** ::ffff:a.b.c.d: how ipBytes holds an IPv4 address. */
function isIPv4Mapped(bytes: Uint8Array): boolean {
  return bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
}

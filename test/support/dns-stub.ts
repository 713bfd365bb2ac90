// A minimal authoritative DNS responder over UDP on 127.0.0.1 (RFC 1035 §4), for
// the SSRF tests: the proxy is started with GUARD_DNS_SERVER=127.0.0.1:<port> and
// every name it resolves is answered from a table the test controls. Only A and
// AAAA questions are answered; a name not in the table is NXDOMAIN, a known name
// without records of the asked type is an empty NOERROR answer. Every question is
// recorded, so a test can count the lookups the proxy made.
import { createSocket, type Socket } from 'node:dgram';
import { isIPv4, isIPv6 } from 'node:net';

const TYPE_A = 1;
const TYPE_AAAA = 28;
const CLASS_IN = 1;

export interface DnsRecords {
  A?: string[];
  AAAA?: string[];
}

/** Fixed records, a function of how many times this name was asked before (0 for the first), or 'silent': never answered. */
export type DnsAnswer = DnsRecords | ((askedBefore: number, type: 'A' | 'AAAA') => DnsRecords) | 'silent';

export interface DnsQuestion {
  name: string;
  type: 'A' | 'AAAA' | number;
  at: number;
}

export interface DnsStub {
  /** `127.0.0.1:<port>`: the value for GUARD_DNS_SERVER. */
  server: string;
  port: number;
  /** Names are lower-cased, without the trailing dot. */
  set(name: string, answer: DnsAnswer): void;
  questions: DnsQuestion[];
  /** Questions for one name (any type). */
  asked(name: string): DnsQuestion[];
  close(): Promise<void>;
}

export async function startDnsStub(table: Record<string, DnsAnswer> = {}): Promise<DnsStub> {
  const answers = new Map<string, DnsAnswer>(Object.entries(table).map(([k, v]) => [k.toLowerCase(), v]));
  const questions: DnsQuestion[] = [];
  const socket: Socket = createSocket('udp4');
  socket.on('message', (msg, rinfo) => {
    const reply = answer(msg);
    if (reply !== null) socket.send(reply, rinfo.port, rinfo.address);
  });

  function answer(msg: Buffer): Buffer | null {
    if (msg.length < 12) return null;
    const qdcount = msg.readUInt16BE(4);
    if (qdcount !== 1) return null;
    // QNAME: length-prefixed labels, no compression in a question.
    const labels: string[] = [];
    let at = 12;
    for (;;) {
      if (at >= msg.length) return null;
      const len = msg[at]!;
      at += 1;
      if (len === 0) break;
      if (len > 63 || at + len > msg.length) return null;
      labels.push(msg.toString('latin1', at, at + len));
      at += len;
    }
    if (at + 4 > msg.length) return null;
    const qtype = msg.readUInt16BE(at);
    const question = msg.subarray(12, at + 4);
    const name = labels.join('.').toLowerCase();
    const type = qtype === TYPE_A ? 'A' : qtype === TYPE_AAAA ? 'AAAA' : qtype;
    const before = questions.filter((q) => q.name === name).length;
    questions.push({ name, type, at: Date.now() });

    const entry = answers.get(name);
    if (entry === 'silent') return null;
    const records = entry === undefined || typeof type === 'number' ? undefined : typeof entry === 'function' ? entry(before, type) : entry;
    const addresses = records === undefined || typeof type === 'number' ? [] : (records[type] ?? []);
    const rdatas = addresses.map((a) => (type === 'A' ? ipv4Bytes(a) : ipv6Bytes(a)));

    const header = Buffer.alloc(12);
    msg.copy(header, 0, 0, 2); // ID
    const rd = msg[2]! & 0x01;
    header[2] = 0x80 | 0x04 | rd; // QR, AA, RD copied
    header[3] = 0x80 | (entry === undefined ? 3 : 0); // RA; NXDOMAIN for an unknown name
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(rdatas.length, 6);
    const records_ = rdatas.map((rdata) => {
      const rr = Buffer.alloc(12 + rdata.length);
      rr.writeUInt16BE(0xc00c, 0); // a pointer to the name in the question
      rr.writeUInt16BE(qtype, 2);
      rr.writeUInt16BE(CLASS_IN, 4);
      rr.writeUInt32BE(1, 6); // TTL 1 s: the proxy's own cache decides how long it keeps an answer
      rr.writeUInt16BE(rdata.length, 10);
      rdata.copy(rr, 12);
      return rr;
    });
    return Buffer.concat([header, question, ...records_]);
  }

  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const port = socket.address().port;
  return {
    server: `127.0.0.1:${port}`,
    port,
    set: (name, value) => {
      answers.set(name.toLowerCase(), value);
    },
    questions,
    asked: (name) => questions.filter((q) => q.name === name.toLowerCase()),
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}

function ipv4Bytes(address: string): Buffer {
  if (!isIPv4(address)) throw new Error(`not an IPv4 address: ${address}`);
  return Buffer.from(address.split('.').map(Number));
}

function ipv6Bytes(address: string): Buffer {
  if (!isIPv6(address)) throw new Error(`not an IPv6 address: ${address}`);
  let text = address;
  const last = text.slice(text.lastIndexOf(':') + 1);
  if (last.includes('.')) {
    const [a, b, c, d] = last.split('.').map(Number) as [number, number, number, number];
    text = `${text.slice(0, text.lastIndexOf(':') + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const front = head === '' ? [] : head.split(':');
  const back = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? front : [...front, ...Array<string>(8 - front.length - back.length).fill('0'), ...back];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

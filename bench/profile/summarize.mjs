// Groups a main-thread CPU profile (node --cpu-prof) by where each sample's
// stack is (leaf first) and prints µs per request: the table in docs/performance.md.
// Usage: node bench/profile/summarize.mjs <file.cpuprofile> <requests served>
import { readFileSync } from 'node:fs';
const p = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const requests = Number(process.argv[3]);
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map(); for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const counts = new Map(); p.samples.forEach((id, i) => counts.set(id, (counts.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
// Specific work is found anywhere in a sample's stack (the audit runs inside
// undici's onData, so a leaf-first search would charge it to undici), in this
// order; the rest goes to the first of the two sockets' sides met leaf first.
const specific = [
  ['idle', (f) => f.functionName === '(idle)'],
  ['garbage collection', (f) => f.functionName === '(garbage collector)'],
  ['audit: journal', (f) => /audit-journal/.test(f.url)],
  ['audit: entry_hash and seals (issue 17)', (f) => /entry-json|audit\/seal/.test(f.url)],
  ['audit: record, encode, batch, insert (chDB)', (f) => /audit-batcher|audit-codec|clickhouse|chdb|record-audit|toAuditRecord|encodeAuditRow|@clickhouse/.test(f.url + f.functionName)],
  ['metrics (prom-client)', (f) => /prom-client|metrics\.js/.test(f.url)],
  ['log_outputs hash (SHA-256 of the body)', (f) => f.functionName === 'hashChunk' || f.functionName === '#outputDigest'],
  ['key, policy, credential caches; policy; target', (f) => /caches|lru-cache|policy|target\.js|authorize|resolve-agent|inject-credential|parse-target|guard-target|admit|ssrf/.test(f.url) || f.functionName === 'hashApiKey'],
];
const sides = [
  ['upstream: undici (HTTP/1.1 client, TLS socket)', (f) => /undici|_tls_wrap|net\.js|stream_base|streams\//.test(f.url) || /writeLatin1String|writeUtf8String|llhttp|wasm/.test(f.functionName + f.url)],
  ['client side: uWS (head read, response write)', (f) => /stream-response|exchange|listener|request-head|request-body|pipeline|forward/.test(f.url)],
];
const OTHER = 'other (Node internals, timers, events)';
const out = new Map([...specific, ...sides].map(([n]) => [n, 0])); out.set(OTHER, 0);
let total = 0;
for (const [id, us] of counts) {
  total += us;
  const stack = [];
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const frame = byId.get(cur).callFrame;
    // A call's last send runs from the journal's turn-end write (ProxyExchange.journaled): it is the client side's.
    if (frame.functionName === 'journaled') break;
    stack.push(frame);
  }
  let hit = specific.find(([, test]) => stack.some(test))?.[0] ?? null;
  for (let i = 0; hit === null && i < stack.length; i++) hit = sides.find(([, test]) => test(stack[i]))?.[0] ?? null;
  out.set(hit ?? OTHER, out.get(hit ?? OTHER) + us);
}
console.log('total profile s', (total / 1e6).toFixed(2), 'requests', requests);
for (const [n, us] of out) console.log(`| ${n} | ${(us / requests).toFixed(1)} | ${(us / total * 100).toFixed(0)} % |`);

// Groups a main-thread CPU profile (node --cpu-prof) by where each sample's
// stack is (leaf first) and prints µs per request: the table in docs/performance.md.
// Usage: node bench/profile/summarize.mjs <file.cpuprofile> <requests served>
import { readFileSync } from 'node:fs';
const p = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const requests = Number(process.argv[3]);
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const parent = new Map(); for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const counts = new Map(); p.samples.forEach((id, i) => counts.set(id, (counts.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
const cats = [
  ['idle', (f) => f.functionName === '(idle)'],
  ['garbage collection', (f) => f.functionName === '(garbage collector)'],
  ['audit: journal', (f) => /audit-journal/.test(f.url)],
  ['audit: record, encode, batch, insert (chDB)', (f) => /audit-batcher|audit-codec|clickhouse|chdb|record-audit|toAuditRecord|encodeAuditRow|@clickhouse/.test(f.url + f.functionName)],
  ['metrics (prom-client)', (f) => /prom-client|metrics\.js/.test(f.url)],
  ['log_outputs hash (SHA-256)', (f) => /crypto\/hash/.test(f.url) || f.functionName === 'hashChunk'],
  ['key, policy, credential caches; policy; target', (f) => /caches|lru-cache|policy|target\.js|authorize|resolve-agent|inject-credential|parse-target|guard-target|admit|ssrf/.test(f.url)],
  ['upstream: undici (HTTP/1.1 client, TLS socket)', (f) => /undici|_tls_wrap|net\.js|stream_base|streams\//.test(f.url) || /writeLatin1String|writeUtf8String|llhttp|wasm/.test(f.functionName + f.url)],
  ['client side: uWS (head read, response write)', (f) => /stream-response|exchange|listener|request-head|request-body|pipeline|forward/.test(f.url)],
];
const out = new Map(cats.map(([n]) => [n, 0])); out.set('other (Node internals, timers, events)', 0);
let total = 0;
for (const [id, us] of counts) {
  total += us;
  // walk up the stack: first category that matches any frame (leaf first)
  let cur = id, hit = null;
  while (cur !== undefined && hit === null) { const f = byId.get(cur).callFrame; for (const [n, test] of cats) if (test(f)) { hit = n; break; } cur = parent.get(cur); }
  out.set(hit ?? 'other (Node internals, timers, events)', out.get(hit ?? 'other (Node internals, timers, events)') + us);
}
console.log('total profile s', (total / 1e6).toFixed(2), 'requests', requests);
for (const [n, us] of out) console.log(`| ${n} | ${(us / requests).toFixed(1)} | ${(us / total * 100).toFixed(0)} % |`);

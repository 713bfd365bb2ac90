// Where a main-thread CPU profile (node --cpu-prof) spends its samples, by
// stage of a proxied call: the table of docs/performance.md ("The event loop,
// per small GET", via summarize.mjs) and the audit-share scenario's event-loop
// part. Specific work is found anywhere in a sample's stack (the audit runs
// inside undici's onData, so a leaf-first search would charge it to undici), in
// the order below; the rest goes to the first of the two sockets' sides met
// from the leaf.

interface CallFrame { functionName: string; url: string }
interface ProfileNode { id: number; callFrame: CallFrame; children?: number[] }
/** What `--cpu-prof` writes (the fields read here). Times are µs of the monotonic clock `process.hrtime` reads. */
export interface CpuProfile { nodes: ProfileNode[]; startTime: number; endTime: number; samples: number[]; timeDeltas: number[] }

export const IDLE = 'idle';
export const GC = 'garbage collection';
export const OTHER = 'other (Node internals, timers, events)';
/** The stages that are the audit's: its journal, its hashes and seals, its rows and their insert. */
export const AUDIT_STAGES = ['audit: journal', 'audit: entry_hash and seals (issue 17)', 'audit: record, encode, batch, insert (chDB)'] as const;

const SPECIFIC: readonly (readonly [string, (f: CallFrame) => boolean])[] = [
  [IDLE, (f) => f.functionName === '(idle)'],
  [GC, (f) => f.functionName === '(garbage collector)'],
  [AUDIT_STAGES[0], (f) => /audit-journal/.test(f.url)],
  [AUDIT_STAGES[1], (f) => /entry-json|audit\/seal/.test(f.url)],
  [AUDIT_STAGES[2], (f) => /audit-batcher|audit-codec|audit-spool|ch-instant|compiled-memo|row-bytes|clickhouse|chdb|record-audit|toAuditRecord|encodeAuditRow/.test(f.url + f.functionName)],
  ['metrics (prom-client)', (f) => /prom-client|metrics\.js/.test(f.url)],
  ['log_outputs hash (SHA-256 of the body)', (f) => f.functionName === 'hashChunk' || f.functionName === '#outputDigest'],
  ['key, policy, credential caches; policy; target', (f) => /caches|lru-cache|policy|target\.js|authorize|resolve-agent|inject-credential|parse-target|guard-target|admit|ssrf/.test(f.url) || f.functionName === 'hashApiKey'],
];
const SIDES: readonly (readonly [string, (f: CallFrame) => boolean])[] = [
  ['upstream: undici (HTTP/1.1 client, TLS socket)', (f) => /undici|_tls_wrap|net\.js|stream_base|streams\//.test(f.url) || /writeLatin1String|writeUtf8String|llhttp|wasm/.test(f.functionName + f.url)],
  ['client side: uWS (head read, response write)', (f) => /stream-response|exchange|listener|request-head|request-body|pipeline|forward/.test(f.url)],
];

/**
 * Sampled µs by stage, in the order of the table, counting the samples taken
 * within [fromUs, toUs] (the whole profile without them).
 */
export function profileStages(profile: CpuProfile, fromUs = -Infinity, toUs = Infinity): Map<string, number> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const perNode = new Map<number, number>();
  let at = profile.startTime;
  profile.samples.forEach((id, i) => {
    const delta = profile.timeDeltas[i] ?? 0;
    at += delta;
    if (at >= fromUs && at <= toUs) perNode.set(id, (perNode.get(id) ?? 0) + delta);
  });
  const out = new Map<string, number>([...SPECIFIC, ...SIDES].map(([name]) => [name, 0]));
  out.set(OTHER, 0);
  for (const [id, us] of perNode) {
    const stack: CallFrame[] = [];
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const frame = byId.get(cur)!.callFrame;
      // A call's last send runs from the journal's turn-end write (ProxyExchange.journaled): it is the client side's.
      if (frame.functionName === 'journaled') break;
      stack.push(frame);
    }
    let hit = SPECIFIC.find(([, test]) => stack.some(test))?.[0] ?? null;
    for (let i = 0; hit === null && i < stack.length; i++) hit = SIDES.find(([, test]) => test(stack[i]!))?.[0] ?? null;
    out.set(hit ?? OTHER, out.get(hit ?? OTHER)! + us);
  }
  return out;
}

// entry_hash (CONTRACT.md "Tamper-evident audit"): SHA-256 of the entry's RFC
// 8785 canonical JSON without entry_hash. The fixed-shape canonicaliser of
// shared/audit/entry-json.ts is checked against the RFC's own vectors and, on
// random entries, against `canonicalize` (a general RFC 8785 implementation).
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import fc from 'fast-check';
import t from 'tap';
import { auditJson, canonicalEntry, entryHash } from '../../shared/audit/entry-json.js';
import { NO_PROXY_DETAIL, type AuditRecord } from '../../shared/types.js';

function record(overrides: Partial<AuditRecord> = {}): AuditRecord {
  return {
    id: '0b7c1d7e-3f0a-4c52-9a43-5b7f0e6f2a11',
    timestamp: '2026-11-24T12:00:00.000Z',
    orgId: '5d0c5a9e-8d6f-4b0b-a2a8-2d1f8e0c7b33',
    agentId: '9a41c3e8-0b7c-4c52-9a43-5b7f0e6f2a11',
    agentName: 'research-bot',
    toolName: 'api.github.com',
    action: 'GET',
    toolUrl: 'https://api.github.com/repos/nodejs/node',
    decision: 'allowed',
    reasoning: '',
    taskId: '',
    latencyMs: 12,
    statusCode: 200,
    ruleMatched: 'default',
    source: 'proxy',
    requestBytes: 0,
    responseBytes: 211,
    outputHash: null,
    output: null,
    outputTruncated: false,
    requestId: '0b7c1d7e-3f0a-4c52-9a43-5b7f0e6f2a11',
    ...NO_PROXY_DETAIL,
    ...overrides,
  };
}

/** The contract's definition, computed with a general RFC 8785 library over the entry as the API shows it. */
function contractHash(entry: Record<string, unknown>): string {
  const { entry_hash: _, ...rest } = entry;
  return createHash('sha256').update(canonicalize(rest)!).digest('hex');
}

t.test('RFC 8785 §3.2.2.2: strings are serialized as the RFC shows', async (t) => {
  // The RFC's example: "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/" → "€$\u000f\nA'B\"\\\\\"/"
  const value = '\u20ac$\u000F\u000aA\'\u0042\u0022\u005c\\"/';
  const canonical = canonicalEntry(record({ reasoning: value }));
  t.ok(canonical.includes(`"reasoning":"€$\\u000f\\nA'B\\"\\\\\\\\\\"/"`), canonical);
});

t.test('RFC 8785 §3.2.3: keys are sorted by UTF-16 code units; no whitespace; literals and integers as ES serializes them', async (t) => {
  const canonical = canonicalEntry(record());
  const keys = [...canonical.matchAll(/"([a-z_]+)":/g)].map((m) => m[1]!);
  t.same(keys, [...keys].sort(), 'sorted');
  t.notOk(keys.includes('entry_hash'), 'without entry_hash');
  t.same(keys.sort(), Object.keys(auditJson(record())).filter((k) => k !== 'entry_hash').sort(), 'every other key of the entry');
  t.notOk(/\s/.test(canonical.replace(/"[^"]*"/g, '')), 'no whitespace outside strings');
  t.match(canonical, /"latency_ms":12,/);
  t.match(canonical, /"output":null,"output_hash":null,"output_truncated":false,/);
  t.equal(canonical, canonicalize(Object.fromEntries(Object.entries(auditJson(record())).filter(([k]) => k !== 'entry_hash'))), 'as a general RFC 8785 implementation writes it');
});

t.test('entryHash equals the contract definition on random entries (as they read back from the store)', async (t) => {
  const text = fc.string({ unit: 'binary', maxLength: 40 });
  const textOrNull = fc.option(text, { nil: null });
  const count = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
  fc.assert(
    // The request id: most often the entry's own id (the agent sent none), else any text.
    fc.property(text, text, textOrNull, textOrNull, fc.boolean(), count, count, fc.date({ min: new Date(0), max: new Date('2100-01-01'), noInvalidDate: true }), fc.oneof(fc.constant(record().id), text), (reasoning, toolUrl, output, mcpTool, truncated, bytes, latency, at, requestId) => {
      const r = record({ reasoning, toolUrl, output, mcpTool, outputTruncated: truncated, responseBytes: bytes, latencyMs: latency, timestamp: at.toISOString(), requestId });
      // How the store keeps it: UTF-8 (a lone surrogate becomes U+FFFD); a column that stores null as '' reads '' back as null.
      const wellFormed = (s: string) => s.replace(/[\uD800-\uDFFF]/gu, '\uFFFD');
      const readBack = { ...auditJson(r), reasoning: wellFormed(reasoning), tool_url: wellFormed(toolUrl), request_id: wellFormed(requestId), output: output === null ? null : wellFormed(output), mcp_tool: mcpTool === null || mcpTool === '' ? null : wellFormed(mcpTool) };
      return entryHash(r) === contractHash(readBack);
    }),
    { numRuns: 2000 },
  );
  t.pass('2,000 random entries agree');
});

t.test('the hash is lowercase hex SHA-256, changes with any field, and a read-back record keeps its stored hash', async (t) => {
  const base = record();
  t.match(entryHash(base), /^[0-9a-f]{64}$/);
  t.not(entryHash(record({ statusCode: 201 })), entryHash(base));
  t.not(entryHash(record({ reasoning: ' ' })), entryHash(base));
  t.equal(entryHash(record({ mcpSessionId: '' })), entryHash(base), "'' where the store keeps null hashes as null");
  t.equal(entryHash(record({ timestamp: '2026-11-24T13:00:00+01:00' })), entryHash(base), 'a timestamp hashes in its stored (UTC, ms) form');
  t.equal(auditJson({ ...base, entryHash: 'f'.repeat(64) }).entry_hash, 'f'.repeat(64), 'a stored hash is returned as stored');
  t.equal(auditJson({ ...base, entryHash: null }).entry_hash, null, 'a row written before hashing has none');
  t.equal(auditJson(base).entry_hash, null, 'nothing is recomputed here: only the hash the row was written with is returned');
});

t.test('a repeated field value reuses its JSON: every entry of a run that repeats and changes fields hashes as alone', async (t) => {
  // The encoder keeps each text field's last value and JSON (entry-json.ts):
  // draw fields from small pools so that consecutive entries repeat some and change others.
  const pick = <T>(...values: T[]) => fc.constantFrom(...values);
  const entry = fc.record({
    agentName: pick('bot', 'bot ', 'b\u00f6t', '"q"', '\uD800'),
    reasoning: pick('', 'why', 'why\n', 'w\\hy'),
    mcpTool: pick<string | null>(null, '', 'search', 'se\tarch'),
    shadowRule: pick<string | null>(null, 'r1', 'r2'),
    timestamp: pick('2026-11-24T12:00:00.000Z', '2026-11-24T12:00:00.001Z', '2026-11-24T13:00:00+01:00'),
    latencyMs: fc.integer({ min: 0, max: 5 }),
  });
  fc.assert(
    fc.property(fc.array(entry, { minLength: 2, maxLength: 30 }), (fields) => {
      const entries = fields.map((f) => record(f));
      const forward = entries.map((r) => entryHash(r));
      const backward = [...entries].reverse().map((r) => entryHash(r)).reverse();
      const wellFormed = (s: string) => s.replace(/[\uD800-\uDFFF]/gu, '\uFFFD');
      return entries.every((r, i) => {
        const json = auditJson(r);
        const readBack = { ...json, agent_name: wellFormed(r.agentName), timestamp: new Date(r.timestamp).toISOString(), mcp_tool: r.mcpTool === '' ? null : r.mcpTool };
        return forward[i] === backward[i] && forward[i] === contractHash(readBack);
      });
    }),
    { numRuns: 500 },
  );
  t.pass('500 runs of entries agree in either order and with the contract');
});

t.test('a value the encoder refuses is refused every time, whatever was encoded before', async (t) => {
  entryHash(record({ timestamp: '2026-11-24T12:00:00.000Z' }));
  t.throws(() => entryHash(record({ timestamp: 'not a time' })), RangeError);
  t.throws(() => entryHash(record({ timestamp: 'not a time' })), RangeError, 'again: no earlier timestamp stands in for it');
  t.throws(() => entryHash(record({ reasoning: undefined as unknown as string })), TypeError, 'a text field that is not a string');
  t.throws(() => entryHash(record({ reasoning: undefined as unknown as string })), TypeError, 'again');
});

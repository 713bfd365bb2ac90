// The audit row's TabSeparated line (shared/audit/audit-codec.ts). The encoder
// keeps each text column's last value and its escaped form, so a line must not
// depend on the rows encoded before it: checked on runs of records whose fields
// repeat and change, encoded forwards and backwards.
import { randomUUID } from 'node:crypto';
import v8 from 'node:v8';
import fc from 'fast-check';
import t from 'tap';
import { AUDIT_COLUMNS, encodeAuditRow } from '../../shared/audit/audit-codec.js';
import { auditRecord } from '../support/audit-records.js';

const ORG = '5d0c5a9e-8d6f-4b0b-a2a8-2d1f8e0c7b33';

t.test('a line escapes tab, newline, carriage return, backslash and NUL, and has one field per column', async (t) => {
  const line = encodeAuditRow(auditRecord(ORG, { reasoning: 'a\tb\nc\rd\\e\0f', mcpTool: 'x\ty' }), 'b4c0ffee-0000-4000-8000-000000000000');
  t.ok(line.endsWith('\n'));
  const fields = line.slice(0, -1).split('\t');
  t.equal(fields.length, AUDIT_COLUMNS.length);
  t.equal(fields[AUDIT_COLUMNS.findIndex((c) => c.name === 'reasoning')], 'a\\tb\\nc\\rd\\\\e\\0f');
  t.equal(fields[AUDIT_COLUMNS.findIndex((c) => c.name === 'mcp_tool')], 'x\\ty');
});

/** ClickHouse's TabSeparated escaping, written out again for the check. */
const ESCAPED: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r', '\0': '\\0' };
const tsvField = (value: string | number | boolean | null) =>
  value === null ? '' : typeof value === 'boolean' ? (value ? '1' : '0') : String(value).replace(/[\\\t\n\r\0]/g, (c) => ESCAPED[c]!);

t.test("a row's line does not depend on the rows encoded before it", async (t) => {
  // Fields repeat and change the way a loaded proxy's do: the encoder memoizes
  // each text column, and runs of adjacent columns together (compiled-memo.ts).
  const pick = <T>(...values: T[]) => fc.constantFrom(...values);
  const AGENTS = ['9a41c3e8-0b7c-4c52-9a43-5b7f0e6f2a11', '0b7c1d7e-3f0a-4c52-9a43-5b7f0e6f2a11'];
  const fields = fc.record({
    agentId: pick(...AGENTS),
    agentName: pick('bot', 'bot\t', 'b\u00f6t'),
    toolUrl: pick('https://a.example/x', 'https://a.example/y\\'),
    reasoning: pick('', 'why', 'why\n', 'w\\hy'),
    statusCode: pick(200, 404),
    mcpTool: pick<string | null>(null, '', 'search', 'se\tarch'),
    ruleMatched: pick('default', 'rule\r1'),
    shadowRule: pick<string | null>(null, 'shadow'),
    policyPath: pick('/x', '/y'),
    approvalId: pick<string | null>(null, 'c3d4e5f6-0000-4000-8000-000000000000'),
    timestamp: pick('2026-11-24T12:00:00.000Z', '2026-11-24T12:00:00.001Z', '2026-11-24T13:00:00+01:00'),
    output: pick<string | null>(null, '', 'out\tput'),
  });
  const checked = (['agentId', 'agentName', 'toolUrl', 'reasoning', 'statusCode', 'mcpTool', 'ruleMatched', 'shadowRule', 'policyPath', 'approvalId', 'output'] as const).map(
    (field) => [field, AUDIT_COLUMNS.findIndex((c) => c.field === field && c.kind !== 'presence')] as const,
  );
  fc.assert(
    fc.property(fc.array(fields, { minLength: 2, maxLength: 30 }), (runs) => {
      const records = runs.map((f) => auditRecord(ORG, f));
      const forward = records.map((r) => encodeAuditRow(r, 'b'));
      const backward = [...records].reverse().map((r) => encodeAuditRow(r, 'b')).reverse();
      // Each line carries its own record's values, whatever came before it.
      const own = forward.every((line, i) => {
        const cells = line.slice(0, -1).split('\t');
        return checked.every(([field, at]) => cells[at] === tsvField(records[i]![field]));
      });
      return own && forward.every((line, i) => line === backward[i]);
    }),
    { numRuns: 500 },
  );
  t.pass('500 runs encode the same in either order, each line with its own values');
});

t.test('a value the encoder refuses is refused every time, whatever was encoded before', async (t) => {
  encodeAuditRow(auditRecord(ORG, { timestamp: '2026-11-24T12:00:00.000Z' }));
  for (let i = 0; i < 3; i++) t.throws(() => encodeAuditRow(auditRecord(ORG, { timestamp: 'not a time' })), RangeError, `try ${i + 1}`);
});

t.test('a bad value inside a memoized run is refused every time, after a good row with the same other fields', async (t) => {
  const agentId = '9a41c3e8-0b7c-4c52-9a43-5b7f0e6f2a11';
  encodeAuditRow(auditRecord(ORG, { agentId, statusCode: 200 }));
  for (let i = 0; i < 3; i++) t.throws(() => encodeAuditRow(auditRecord(ORG, { agentId, statusCode: 1.5 })), RangeError, `try ${i + 1}`);
  t.match(encodeAuditRow(auditRecord(ORG, { agentId, statusCode: 201 })), /\t201\t/, 'the next good value is encoded');
});

t.test('a line of ASCII fields is a one-byte string, even when its ids are internalized (thin) strings', async (t) => {
  // Store ids are used as property and map keys, which turns them into thin
  // strings. Array.join makes a two-byte string of those, and one two-byte line
  // makes its whole batch two-byte: twice the memory, held until written.
  const ids = JSON.parse(JSON.stringify({ org: randomUUID(), agent: randomUUID() })) as { org: string; agent: string };
  const byKey: Record<string, number> = {};
  byKey[ids.org] = 1;
  byKey[ids.agent] = 2;
  // v8.serialize writes a one-byte string with the tag '"', a two-byte one with 'c' (after the version header, and padding).
  const tag = (s: string) => [...v8.serialize(s).subarray(2, 6)].map((b) => String.fromCharCode(b)).find((c) => c === '"' || c === 'c');
  for (let i = 0; i < 3; i++) {
    const line = encodeAuditRow(auditRecord(ids.org, { agentId: ids.agent, agentName: 'bot', reasoning: 'why' }), randomUUID());
    t.equal(tag(line), '"', `line ${i + 1} is one-byte`);
  }
});

// The audit PDF (contract: "Audit", GET /audit/export/pdf), rendered from
// hand-built report data and read back as text with pdf-parse.
import t, { type Test } from 'tap';
import pdfParse from 'pdf-parse/lib/pdf-parse.js';
import { renderAuditPdf, type AuditPdfInput } from '../../admin/report/audit-pdf.js';
import { NO_PROXY_DETAIL, type AuditRecord } from '../../shared/types.js';
import type { AuditReportData } from '../../shared/stores/audit-store.js';

const DAY_MS = 86_400_000;
const ORG_NAME = 'Acme Robotics GmbH';
const ORG_ID = 'org_01HQ3X';
const FOOTER_LEFT = `Tool-Call Guard audit report · ${ORG_NAME}`;

// A4 in points and the report's margin: nothing but the footer may sit below
// the bottom margin.
const PAGE_HEIGHT = 841.89;
const PAGE_WIDTH = 595.28;
const MARGIN = 48;
/**
 * Entry rows on a page the entries table continues onto: the page's 745.89 pt
 * between the margins, less the "(continued)" line (16) and the header row
 * (16), in rows of 14 pt: floor(713.89 / 14) = 50.
 */
const ENTRY_ROWS_PER_CONTINUED_PAGE = 50;

const ENTRY_HEADER = ['Time (UTC)', 'Agent', 'Tool', 'Action', 'Decision', 'Status', 'Latency'];
const DENIED_HEADER = ['Time (UTC)', 'Agent', 'Tool', 'Action', 'Rule matched', 'Reasoning'];
const TIME_CELL = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;
/** The report cuts with '…' (WinAnsi 0x85); pdf.js extracts that glyph as three dots. */
const ELLIPSIS = '...';

interface Agent {
  id: string;
  name: string;
}

const AGENTS: Agent[] = [
  { id: 'ag_research', name: 'research-bot' },
  { id: 'ag_billing', name: 'billing-agent' },
  { id: 'ag_cafe', name: 'Café-helper' },
  { id: 'ag_cjk', name: '数据代理' },
];
const TOOLS = ['web.search', 'github.create_issue', 'slack.post_message', 'stripe.refund'];
const DENIED_REASONING = `🧾 Refunds over $500\nneed a human approver ${'and a second signature '.repeat(40)}`;

/** Calls spread over the given days of the window, a deterministic mix of agents, tools and decisions. */
function makeCalls(since: Date, dayIndexes: number[], count: number): AuditRecord[] {
  const calls: AuditRecord[] = [];
  for (let i = 0; i < count; i++) {
    const day = dayIndexes[i % dayIndexes.length]!;
    const agent = AGENTS[i % AGENTS.length]!;
    const denied = i % 9 === 0;
    const at = new Date(since.getTime() + day * DAY_MS + ((i * 7919) % 86_400) * 1000 + (i % 1000));
    calls.push({
      id: `au_${i}`,
      timestamp: at.toISOString(),
      orgId: ORG_ID,
      agentId: agent.id,
      agentName: agent.name,
      toolName: TOOLS[Math.floor(i / AGENTS.length) % TOOLS.length]!,
      action: i % 2 === 0 ? 'GET' : 'POST /v1/refunds',
      toolUrl: 'https://api.example.com/v1/refunds',
      decision: denied ? 'denied' : 'allowed',
      reasoning: denied ? DENIED_REASONING : '',
      taskId: `task_${i % 17}`,
      latencyMs: 5 + ((i * 37) % 500),
      statusCode: denied ? 403 : 200,
      ruleMatched: denied ? 'deny-large-refunds' : '',
      source: 'proxy',
      requestBytes: 120,
      responseBytes: 2048,
      outputHash: null,
      output: null,
      outputTruncated: false,
      requestId: `req_${i}`,
      ...NO_PROXY_DETAIL,
    });
  }
  return calls.sort((a, b) => (a.timestamp < b.timestamp ? 1 : a.timestamp > b.timestamp ? -1 : 0));
}

/** Nearest-rank percentile of whole-millisecond latencies. */
function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** What the audit store's report() returns for these calls (newest first). */
function reportData(calls: AuditRecord[], maxEntries: number): AuditReportData {
  const denied = calls.filter((c) => c.decision === 'denied');
  const perDay = new Map<string, { allowed: number; denied: number }>();
  for (const c of calls) {
    const day = c.timestamp.slice(0, 10);
    const counts = perDay.get(day) ?? { allowed: 0, denied: 0 };
    counts[c.decision]++;
    perDay.set(day, counts);
  }
  return {
    totals: {
      calls: calls.length,
      allowed: calls.length - denied.length,
      denied: denied.length,
      p50LatencyMs: percentile(calls.map((c) => c.latencyMs), 50),
      p95LatencyMs: percentile(calls.map((c) => c.latencyMs), 95),
    },
    perDay: [...perDay]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([day, counts]) => ({ day, ...counts })),
    perAgent: AGENTS.map((agent) => {
      const own = calls.filter((c) => c.agentId === agent.id);
      const ownDenied = own.filter((c) => c.decision === 'denied').length;
      return {
        agentId: agent.id,
        agentName: agent.name,
        calls: own.length,
        allowed: own.length - ownDenied,
        denied: ownDenied,
        p50LatencyMs: percentile(own.map((c) => c.latencyMs), 50),
      };
    }).filter((a) => a.calls > 0),
    topTools: TOOLS.map((toolName) => ({
      toolName,
      calls: calls.filter((c) => c.toolName === toolName).length,
      denied: denied.filter((c) => c.toolName === toolName).length,
    }))
      .filter((tool) => tool.calls > 0)
      .sort((a, b) => b.calls - a.calls),
    recentDenied: denied.slice(0, 10),
    entries: calls.slice(0, maxEntries),
  };
}

interface TextItem {
  str: string;
  x: number;
  y: number;
  width: number;
}

interface ParsedPdf {
  numpages: number;
  info: Record<string, unknown>;
  /** Per page, the text items. */
  items: TextItem[][];
  /** Per page, lines top to bottom, each the cells (text items) left to right. */
  lines: string[][][];
}

async function parsePdf(pdf: Buffer): Promise<ParsedPdf> {
  const items: TextItem[][] = [];
  // A plain Uint8Array, not the Buffer: pdf.js clones its input with
  // `new input.constructor(input)`, which for a Buffer makes a view into Node's
  // shared pool, and then misreads small (pooled) documents as "bad XRef entry".
  const result = await pdfParse(new Uint8Array(pdf), {
    // pdf-parse renders pages one after another, so pages arrive in order.
    pagerender: async (page) => {
      const content = await page.getTextContent({ normalizeWhitespace: false, disableCombineTextItems: false });
      items.push(content.items.map((it) => ({ str: it.str, x: it.transform[4]!, y: it.transform[5]!, width: it.width })));
      return '';
    },
  });
  const lines = items.map((pageItems) => {
    const byBaseline = new Map<number, TextItem[]>();
    for (const item of pageItems) {
      if (item.str.trim() === '') continue;
      const key = Math.round(item.y * 10) / 10;
      byBaseline.set(key, [...(byBaseline.get(key) ?? []), item]);
    }
    return [...byBaseline]
      .sort(([a], [b]) => b - a)
      .map(([, row]) => row.sort((a, b) => a.x - b.x).map((it) => it.str));
  });
  return { numpages: result.numpages, info: result.info ?? {}, items, lines };
}

function allLines(parsed: ParsedPdf): string[][] {
  return parsed.lines.flat();
}

function hasLine(parsed: ParsedPdf, cells: string[]): boolean {
  return allLines(parsed).some((line) => line.length === cells.length && line.every((c, i) => c === cells[i]));
}

function isEntryRow(line: string[]): boolean {
  return line.length === ENTRY_HEADER.length && TIME_CELL.test(line[0]!) && (line[4] === 'allowed' || line[4] === 'denied');
}

function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}

/** Every page carries "Page i of n" with the real page count, and nothing else sits below the bottom margin. */
function checkPages(t: Test, parsed: ParsedPdf, footerLeft = FOOTER_LEFT): void {
  parsed.lines.forEach((lines, i) => {
    t.same(lines.at(-1), [footerLeft, `Page ${i + 1} of ${parsed.numpages}`], `footer of page ${i + 1}`);
  });
  const strays = parsed.items.flatMap((pageItems, i) =>
    pageItems
      .filter((it) => it.str.trim() !== '')
      .filter((it) => it.y < MARGIN || it.y > PAGE_HEIGHT - MARGIN)
      .filter((it) => it.str !== footerLeft && !it.str.startsWith('Page '))
      .map((it) => `page ${i + 1}: ${it.str} at y=${it.y}`),
  );
  t.same(strays, [], 'no text outside the margins but the footer');
}

function input(overrides: Partial<AuditPdfInput> & { data: AuditReportData }): AuditPdfInput {
  return {
    orgName: ORG_NAME,
    orgId: ORG_ID,
    since: new Date('2025-03-01T00:00:00.000Z'),
    until: new Date('2025-03-31T00:00:00.000Z'),
    days: 30,
    generatedAt: new Date('2025-03-31T00:05:00.000Z'),
    maxEntries: 500,
    ...overrides,
  };
}

t.test('a 30-day report holds every section, cut at the cap and paginated with repeated headers', async (t) => {
  const since = new Date('2025-03-01T00:00:00.000Z');
  const emptyDays = new Set([4, 5, 11, 18, 19, 25]);
  const busyDays = Array.from({ length: 30 }, (_, d) => d).filter((d) => !emptyDays.has(d));
  const calls = makeCalls(since, busyDays, 1234);
  const data = reportData(calls, 500);
  const report = input({ since, data });

  await renderAuditPdf(report); // warm pdfkit's font metrics before timing
  const started = performance.now();
  const pdf = await renderAuditPdf(report);
  const elapsedMs = performance.now() - started;
  t.comment(`rendered 500 entries in ${elapsedMs.toFixed(0)} ms (${pdf.length} bytes)`);
  t.ok(elapsedMs < 1000, `500 entries render in under a second (took ${elapsedMs.toFixed(0)} ms)`);

  t.equal(pdf.subarray(0, 5).toString('latin1'), '%PDF-');
  const parsed = await parsePdf(pdf);
  t.equal(parsed.info.Title, `Tool-Call Guard — audit report — ${ORG_NAME}`);
  t.equal(parsed.info.Author, 'Tool-Call Guard');

  // Title block.
  t.ok(hasLine(parsed, ['Tool-Call Guard — audit report']));
  t.ok(hasLine(parsed, ['Organisation', `${ORG_NAME} (${ORG_ID})`]));
  t.ok(hasLine(parsed, ['Window', '2025-03-01T00:00:00Z to 2025-03-31T00:00:00Z (30 days)']));
  t.ok(hasLine(parsed, ['Generated', '2025-03-31T00:05:00Z']));

  // Totals, computed here from the calls: 1,234 calls, every ninth denied.
  const { totals } = data;
  t.equal(totals.calls, 1234);
  t.equal(totals.denied, 138);
  t.ok(hasLine(parsed, ['CALLS', 'ALLOWED', 'DENIED', 'DENY RATE', 'P50 LATENCY', 'P95 LATENCY']));
  t.ok(
    hasLine(parsed, ['1,234', '1,096', '138', '11.2%', `${totals.p50LatencyMs} ms`, `${totals.p95LatencyMs} ms`]),
    'totals: calls, allowed, denied, deny rate, p50, p95',
  );

  // Chart labels: one per day of the window while they fit; the axis from 0.
  const dayLabels = allLines(parsed).find((line) => line[0] === '03-01');
  t.ok(dayLabels, 'the chart labels its days');
  t.equal(dayLabels!.at(-1), '03-29', 'the last labelled day lies in the window');
  t.ok(hasLine(parsed, ['Allowed', 'Denied']), 'the chart has its legend');

  // Per-agent table: the Latin names as given, the non-Latin one as '?' per character.
  for (const row of data.perAgent) {
    const name = row.agentName === '数据代理' ? '????' : row.agentName;
    const rate = `${((row.denied / row.calls) * 100).toFixed(1)}%`;
    t.ok(
      hasLine(parsed, [name, formatCount(row.calls), formatCount(row.allowed), formatCount(row.denied), rate, `${row.p50LatencyMs} ms`]),
      `agent row for ${name}`,
    );
  }
  t.notOk(allLines(parsed).flat().some((cell) => cell.includes('数')), 'no glyph outside WinAnsi is written');

  // Top tools.
  const top = data.topTools[0]!;
  t.ok(hasLine(parsed, [top.toolName, formatCount(top.calls), formatCount(top.denied)]), `top tool ${top.toolName}`);

  // Most recent denied: one line per call, the reasoning cut with an ellipsis, never wrapped.
  const deniedHeaderAt = allLines(parsed).findIndex((line) => line.join('|') === DENIED_HEADER.join('|'));
  t.ok(deniedHeaderAt >= 0, 'the denied table has its header');
  const deniedRows = allLines(parsed).filter((line) => line.length === DENIED_HEADER.length && TIME_CELL.test(line[0]!));
  t.equal(deniedRows.length, 10);
  t.same(
    deniedRows.map((row) => row[0]),
    data.recentDenied.map((r) => r.timestamp.slice(0, 19).replace('T', ' ')),
    'the recent denied calls, newest first',
  );
  for (const row of deniedRows) {
    t.equal(row[4], 'deny-large-refunds');
    t.match(row[5], /^\? Refunds over \$500 need a/, 'reasoning: the emoji as ?, the newline as a space');
    t.ok(row[5]!.endsWith(ELLIPSIS) && row[5]!.length < 60, 'reasoning cut to its column with an ellipsis');
  }

  // Entries: the cap line, then 500 rows newest first over pages that each repeat the header.
  t.ok(hasLine(parsed, ['Showing 500 of 1,234 entries (cap: 500).']));
  const rowsPerPage = parsed.lines.map((lines) => lines.filter(isEntryRow).length);
  t.equal(rowsPerPage.reduce((a, b) => a + b, 0), 500, 'every entry under the cap is listed');
  const entryRows = allLines(parsed).filter(isEntryRow);
  t.same(
    entryRows.map((row) => row[0]),
    data.entries.map((r) => r.timestamp.slice(0, 19).replace('T', ' ')),
    'entries newest first',
  );
  const newest = data.entries[0]!;
  t.same(entryRows[0], [
    newest.timestamp.slice(0, 19).replace('T', ' '),
    newest.agentName === '数据代理' ? '????' : newest.agentName,
    newest.toolName,
    newest.action,
    newest.decision,
    String(newest.statusCode),
    `${newest.latencyMs} ms`,
  ]);

  const firstEntryPage = rowsPerPage.findIndex((n) => n > 0);
  const lastEntryPage = rowsPerPage.length - 1 - [...rowsPerPage].reverse().findIndex((n) => n > 0);
  t.equal(lastEntryPage, parsed.numpages - 1, 'the entries end the report');
  for (let p = firstEntryPage; p <= lastEntryPage; p++) {
    const lines = parsed.lines[p]!;
    const headerAt = lines.findIndex((line) => line.join('|') === ENTRY_HEADER.join('|'));
    const firstRowAt = lines.findIndex(isEntryRow);
    t.ok(headerAt >= 0 && headerAt < firstRowAt, `page ${p + 1} opens its entries with the header row`);
    if (p > firstEntryPage) t.same(lines[0], ['Entries (continued)'], `page ${p + 1} says the table continues`);
    if (p > firstEntryPage && p < lastEntryPage) {
      t.equal(rowsPerPage[p], ENTRY_ROWS_PER_CONTINUED_PAGE, `page ${p + 1} is filled to the bottom margin`);
    }
  }
  // Page 1 holds title, totals, chart, agents, tools and the first denied
  // calls; page 2 the rest of them, the start of the entries (45 rows) and
  // then 455 rows at 50 a page need 10 more pages: 12 in all.
  t.equal(firstEntryPage, 1, 'the entries start on page 2');
  t.equal(rowsPerPage[1], 45);
  t.equal(parsed.numpages, 2 + Math.ceil((500 - 45) / ENTRY_ROWS_PER_CONTINUED_PAGE));
  t.equal(parsed.numpages, 12);
  t.same(parsed.lines[0]!.at(-1), [FOOTER_LEFT, 'Page 1 of 12']);
  checkPages(t, parsed);
});

/** A window without calls. */
function emptyData(): AuditReportData {
  return {
    totals: { calls: 0, allowed: 0, denied: 0, p50LatencyMs: 0, p95LatencyMs: 0 },
    perDay: [],
    perAgent: [],
    topTools: [],
    recentDenied: [],
    entries: [],
  };
}

t.test('a window without calls renders one page of zero totals and empty sections', async (t) => {
  const data = emptyData();
  const pdf = await renderAuditPdf(input({ data }));
  t.equal(pdf.subarray(0, 5).toString('latin1'), '%PDF-');
  const parsed = await parsePdf(pdf);
  t.equal(parsed.numpages, 1);
  t.ok(hasLine(parsed, ['0', '0', '0', '—', '—', '—']), 'totals are zero, rate and latencies have nothing to show');
  t.ok(hasLine(parsed, ['No calls in this window']), 'the chart says it is empty');
  t.ok(hasLine(parsed, ['0']), 'the empty chart keeps its zero line');
  t.ok(hasLine(parsed, ['No agent made a call in this window.']));
  t.ok(hasLine(parsed, ['No tool was called in this window.']));
  t.ok(hasLine(parsed, ['No call was denied in this window.']));
  t.ok(hasLine(parsed, ['Showing 0 of 0 entries (cap: 500).']));
  t.ok(hasLine(parsed, ['No entries in this window.']));
  checkPages(t, parsed);
});

t.test('the seals section keeps its text inside the margins, however many seals cover the window', async (t) => {
  const pdf = await renderAuditPdf(input({ data: emptyData(), seals: [], sealCount: 12_345, keyFingerprint: 'f'.repeat(64) }));
  const parsed = await parsePdf(pdf);
  const past = parsed.items.flat().filter((it) => it.str.trim() !== '' && it.x + it.width > PAGE_WIDTH - MARGIN + 0.5);
  t.same(past.map((it) => it.str), [], 'no text runs past the right margin');
  const text = allLines(parsed).map((line) => line.join(' ')).join(' ');
  t.match(text, /12,345 seals cover this window/);
  t.match(text, /GET \/audit\/seals lists all\)/, 'the whole sentence is on the page');
  t.match(text, new RegExp('f'.repeat(64)), 'and the whole fingerprint');
  checkPages(t, parsed);
});

t.test('a 365-day window labels its months and lists every entry', async (t) => {
  const since = new Date('2024-04-01T00:00:00.000Z');
  const until = new Date('2025-04-01T00:00:00.000Z');
  const busyDays = Array.from({ length: 365 }, (_, d) => d).filter((d) => d % 3 === 0);
  const calls = makeCalls(since, busyDays, 300);
  const data = reportData(calls, 1000);
  const pdf = await renderAuditPdf(input({ since, until, days: 365, maxEntries: 1000, data }));
  t.equal(pdf.subarray(0, 5).toString('latin1'), '%PDF-');
  const parsed = await parsePdf(pdf);
  t.ok(hasLine(parsed, ['Window', '2024-04-01T00:00:00Z to 2025-04-01T00:00:00Z (365 days)']));
  const months = allLines(parsed).find((line) => line[0] === 'Apr 2024');
  t.same(
    months,
    ['Apr 2024', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec', 'Jan 2025', 'Feb', 'Mar'],
    'one label per month of the window, with the year where it starts',
  );
  t.ok(hasLine(parsed, ['Showing 300 of 300 entries (cap: 1,000).']));
  t.equal(allLines(parsed).filter(isEntryRow).length, 300);
  t.ok(parsed.numpages > 1);
  checkPages(t, parsed);
});

t.test('hostile strings and numbers render as a PDF instead of throwing', async (t) => {
  const hostile: AuditRecord = {
    ...makeCalls(new Date('2025-03-01T00:00:00.000Z'), [0], 1)[0]!,
    timestamp: 'not a time',
    agentName: `bell\u0007 tab\t lone\uD800 ${'x'.repeat(100_000)}`,
    toolName: '\u0085\u009F',
    latencyMs: Number.NaN,
    statusCode: Number.POSITIVE_INFINITY,
  };
  const data: AuditReportData = {
    totals: { calls: Number.NaN, allowed: -1, denied: Number.POSITIVE_INFINITY, p50LatencyMs: Number.NaN, p95LatencyMs: -5 },
    perDay: [{ day: 'garbage', allowed: 3, denied: 1 }, { day: '2025-03-02', allowed: Number.NaN, denied: 2 }],
    perAgent: [{ agentId: 'ag', agentName: '', calls: 0, allowed: 0, denied: 0, p50LatencyMs: Number.NaN }],
    topTools: [{ toolName: '😀'.repeat(50), calls: 1, denied: 0 }],
    recentDenied: [hostile],
    entries: [hostile],
  };
  const pdf = await renderAuditPdf(
    input({
      orgName: 'Zürich\u0000 AG\uDC00',
      since: new Date(Number.NaN),
      until: new Date('2025-03-31T00:00:00.000Z'),
      days: Number.NaN,
      generatedAt: new Date(Number.NaN),
      maxEntries: Number.NaN,
      data,
    }),
  );
  t.equal(pdf.subarray(0, 5).toString('latin1'), '%PDF-');
  const parsed = await parsePdf(pdf);
  t.ok(hasLine(parsed, ['Organisation', `Zürich? AG? (${ORG_ID})`]), 'controls and lone surrogates become ?');
  t.ok(hasLine(parsed, ['Window', '— to 2025-03-31T00:00:00Z (0 days)']));
  t.ok(hasLine(parsed, ['0', '0', '0', '—', '—', '—']), 'NaN, negative and infinite totals show as 0 or —');
  const entry = allLines(parsed).find((line) => line[0] === 'not a time' && line.length === ENTRY_HEADER.length);
  t.ok(entry, 'the entry is listed on one line');
  t.match(entry![1], /^bell\? tab  lone\? x+/, 'BEL and the lone surrogate as ?, the tab as a space');
  t.ok(entry![1]!.endsWith(ELLIPSIS) && entry![1]!.length < 40, 'a 100,000-character name is cut to its column');
  t.equal(entry![2], '??', 'C1 controls are not drawn as CP1252 glyphs');
  t.same(entry!.slice(4), ['denied', '—', '—'], 'an infinite status and a NaN latency show as —');
  checkPages(t, parsed, 'Tool-Call Guard audit report · Zürich? AG?');
});

t.test('the approvals of held calls are listed, pending first, with who decided them, cut at the cap with a note', async (t) => {
  const data = emptyData();
  const approval = (n: number, status: 'pending' | 'approved' | 'denied' | 'expired' | 'used', decidedBy: string | null) => ({
    id: `00000000-0000-4000-8000-00000000000${n}`,
    orgId: ORG_ID,
    agentId: 'a',
    agentName: 'billing-bot',
    toolName: 'api.stripe.com',
    action: 'POST',
    host: n === 3 ? 'api.stripe.com:8443' : 'api.stripe.com',
    path: `/v1/c/${n}`,
    query: n === 4 ? 'a=5' : '',
    reasoning: '',
    taskId: '',
    ruleMatched: 'payments',
    status,
    createdAt: `2026-03-0${n}T10:00:00.000Z`,
    expiresAt: '2026-03-09T10:00:00.000Z',
    decidedAt: decidedBy === null ? null : `2026-03-0${n}T10:05:00.000Z`,
    decidedBy,
    note: null,
    bodySha256: '0'.repeat(64),
    bodyBytes: 0,
  });
  const approvals = [approval(4, 'used', 'alice@example.com'), approval(3, 'denied', 'bob@example.com'), approval(2, 'pending', null), approval(1, 'approved', 'carol@example.com')];
  const parsed = await parsePdf(await renderAuditPdf(input({ data, approvals, maxApprovals: 3 })));
  t.ok(hasLine(parsed, ['Approvals of held calls']));
  t.ok(hasLine(parsed, ['2026-03-02 10:00:00', 'billing-bot', 'POST api.stripe.com/v1/c/2', 'pending', '—', '—']), 'the pending one, first');
  t.ok(hasLine(parsed, ['2026-03-04 10:00:00', 'billing-bot', 'POST api.stripe.com/v1/c/4?a=5', 'used', 'alice@example.com', '2026-03-04 10:05:00']));
  t.ok(hasLine(parsed, ['2026-03-03 10:00:00', 'billing-bot', 'POST api.stripe.com:8443/v1/c/3', 'denied', 'bob@example.com', '2026-03-03 10:05:00']));
  const text = allLines(parsed).flat().join('\n');
  t.notOk(text.includes('carol@example.com'), 'cut at the cap');
  t.match(text, /Showing 3 of them; more were made in this window/);
  const empty = await parsePdf(await renderAuditPdf(input({ data, approvals: [] })));
  t.ok(hasLine(empty, ['No call was held for approval in this window.']));
});

// The audit report behind GET /audit/export/pdf (contract: "Audit"): the org and
// window, totals, calls per day, per-agent and top-tool tables, the most recent
// denied calls, the approvals of held calls made in the window (pending first),
// the entries cut at a stated cap, and last the seals covering the window (in
// full, in a fixed-width font) with how to verify them.
//
// Only the 14 standard PDF fonts are used, so no font file ships with the
// service. They are encoded as WinAnsi (pdfkit writes any other code point as
// garbage bytes), so every user-supplied string goes through `toWinAnsi` first.
// Every cell is cut to its column with an ellipsis and drawn with
// `lineBreak: false`, which keeps pdfkit from wrapping or adding pages on its own:
// this file alone decides where a page ends.
import PDFDocument from 'pdfkit';
import type { ReportEntry } from '../../shared/audit/audit-codec.js';
import type { AuditReportData } from '../../shared/stores/audit-store.js';
import type { Approval } from '../../shared/types.js';
import type { Seal } from '../../shared/audit/seal.js';

export interface AuditPdfInput {
  orgName: string;
  orgId: string;
  since: Date;
  until: Date;
  /** The window length asked for (1–365). */
  days: number;
  generatedAt: Date;
  /** The cap the store applied to `data.entries`; stated in the report. */
  maxEntries: number;
  data: AuditReportData;
  /** The org's approvals created in the window, newest first, at most `maxApprovals` (+1 to tell that more exist). */
  approvals?: readonly Approval[];
  maxApprovals?: number;
  /** The seals meeting the window, oldest first, at most `maxSeals`; `sealCount` is how many there are. */
  seals?: readonly Seal[];
  sealCount?: number;
  /** SHA-256 of the public key's SPKI DER: what a reader compares GET /audit/public-key with. */
  keyFingerprint?: string;
}

const REPORT_TITLE = 'Tool-Call Guard — audit report';
const AUTHOR = 'Tool-Call Guard';

const FONT = 'Helvetica';
const FONT_BOLD = 'Helvetica-Bold';
const FONT_ITALIC = 'Helvetica-Oblique';
/** Hashes and signatures are printed whole, in a fixed-width font, to be typed or compared. */
const FONT_MONO = 'Courier';
const MONO_SIZE = 6.8;
const MONO_LINE = 9;

const MARGIN = 48;
const BODY_SIZE = 8;
const HEADER_SIZE = 7.5;
const ROW_HEIGHT = 14;
const HEADER_ROW_HEIGHT = 16;
const CELL_PAD = 4;
const SECTION_GAP = 18;
const SECTION_TITLE_HEIGHT = 20;
/** A section title never ends a page: it stays with the table header and this many rows. */
const ROWS_KEPT_WITH_TITLE = 3;
/** More bars than this cannot be told apart on A4; also bounds the work for a bogus window. */
const MAX_CHART_DAYS = 800;
const DAY_MS = 86_400_000;
const MAX_BAR_WIDTH = 28;

const COLOR = {
  text: '#1f2933',
  muted: '#616e7c',
  rule: '#cbd2d9',
  headerFill: '#e4e7eb',
  zebra: '#f5f7fa',
  grid: '#e4e7eb',
  allowed: '#3f8f6f',
  denied: '#c8553d',
} as const;

type Align = 'left' | 'right';

interface Column {
  header: string;
  /** Share of the content width. */
  weight: number;
  align?: Align;
}

type Cell = string | { text: string; color: string };

/** Where the next thing goes, and the box it must stay inside. */
interface Cursor {
  doc: PDFKit.PDFDocument;
  y: number;
  readonly left: number;
  readonly right: number;
  readonly width: number;
  readonly top: number;
  readonly bottom: number;
}

export function renderAuditPdf(input: AuditPdfInput): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    try {
      const orgName = toWinAnsi(input.orgName);
      const info: PDFKit.DocumentInfo = {
        Title: `${REPORT_TITLE} — ${orgName}`,
        Author: AUTHOR,
      };
      if (isValidDate(input.generatedAt)) info.CreationDate = input.generatedAt;
      const doc = new PDFDocument({
        size: 'A4',
        margins: { top: MARGIN, bottom: MARGIN, left: MARGIN, right: MARGIN },
        bufferPages: true,
        info,
      });
      const chunks: Buffer[] = [];
      doc.on('data', (chunk: Buffer) => chunks.push(chunk));
      doc.on('end', () => resolve(Buffer.concat(chunks)));
      doc.on('error', reject);

      const cursor: Cursor = {
        doc,
        y: MARGIN,
        left: MARGIN,
        right: doc.page.width - MARGIN,
        width: doc.page.width - 2 * MARGIN,
        top: MARGIN,
        bottom: doc.page.height - MARGIN,
      };
      const data = input.data ?? ({} as Partial<AuditReportData>);
      const totals = data.totals ?? { calls: 0, allowed: 0, denied: 0, p50LatencyMs: 0, p95LatencyMs: 0 };

      drawTitleBlock(cursor, input, orgName);
      drawTotals(cursor, totals);
      drawDailyChart(cursor, input.since, input.until, data.perDay ?? []);
      drawAgentTable(cursor, data.perAgent ?? []);
      drawToolTable(cursor, data.topTools ?? []);
      drawRecentDenied(cursor, data.recentDenied ?? []);
      if (input.approvals !== undefined) drawApprovals(cursor, input.approvals, input.maxApprovals ?? Infinity);
      drawEntries(cursor, data.entries ?? [], totals.calls, input.maxEntries);
      if (input.seals !== undefined) drawSeals(cursor, input);
      drawFooters(doc, orgName);
      doc.end();
    } catch (err) {
      reject(err instanceof Error ? err : new Error(String(err)));
    }
  });
}

// ---------------------------------------------------------------------------
// Sections

function drawTitleBlock(c: Cursor, input: AuditPdfInput, orgName: string): void {
  const { doc } = c;
  text(doc, REPORT_TITLE, c.left, c.y, { font: FONT_BOLD, size: 18 });
  c.y += 30;

  const days = Number.isFinite(input.days) ? Math.round(input.days) : 0;
  const lines: [string, string][] = [
    ['Organisation', `${orgName} (${toWinAnsi(input.orgId)})`],
    ['Window', `${isoSeconds(input.since)} to ${isoSeconds(input.until)} (${formatCount(days)} ${days === 1 ? 'day' : 'days'})`],
    ['Generated', isoSeconds(input.generatedAt)],
  ];
  const labelWidth = 72;
  for (const [label, value] of lines) {
    text(doc, label, c.left, c.y, { font: FONT_BOLD, size: 9, color: COLOR.muted });
    doc.font(FONT).fontSize(9);
    text(doc, fit(doc, value, c.width - labelWidth), c.left + labelWidth, c.y, { font: FONT, size: 9 });
    c.y += 14;
  }
  c.y += 6;
  hRule(c, c.y, COLOR.rule, 0.75);
  c.y += SECTION_GAP;
}

function drawTotals(c: Cursor, totals: AuditReportData['totals']): void {
  const { doc } = c;
  sectionTitle(c, 'Totals', 52);
  const calls = finite(totals.calls);
  const denied = finite(totals.denied);
  const cards: [string, string, string][] = [
    ['Calls', formatCount(calls), COLOR.text],
    ['Allowed', formatCount(totals.allowed), COLOR.allowed],
    ['Denied', formatCount(denied), COLOR.denied],
    ['Deny rate', formatRate(denied, calls), COLOR.text],
    ['p50 latency', calls > 0 ? formatMs(totals.p50LatencyMs) : '—', COLOR.text],
    ['p95 latency', calls > 0 ? formatMs(totals.p95LatencyMs) : '—', COLOR.text],
  ];
  const gap = 6;
  const cardWidth = (c.width - gap * (cards.length - 1)) / cards.length;
  const cardHeight = 44;
  cards.forEach(([label, value, color], i) => {
    const x = c.left + i * (cardWidth + gap);
    doc.lineWidth(0.75).roundedRect(x, c.y, cardWidth, cardHeight, 3).fillAndStroke(COLOR.zebra, COLOR.rule);
    text(doc, label.toUpperCase(), x + 8, c.y + 8, { font: FONT_BOLD, size: 6.5, color: COLOR.muted });
    doc.font(FONT_BOLD).fontSize(14);
    text(doc, fit(doc, value, cardWidth - 16), x + 8, c.y + 21, { font: FONT_BOLD, size: 14, color });
  });
  c.y += cardHeight + SECTION_GAP;
}

function drawDailyChart(c: Cursor, since: Date, until: Date, perDay: AuditReportData['perDay']): void {
  const { doc } = c;
  const chartHeight = 150;
  sectionTitle(c, 'Calls per day (UTC)', chartHeight);
  const days = dayBuckets(since, until, perDay);

  // Legend, top right of the chart.
  const legend: [string, string][] = [['Allowed', COLOR.allowed], ['Denied', COLOR.denied]];
  doc.font(FONT).fontSize(BODY_SIZE);
  let lx = c.right;
  for (let i = legend.length - 1; i >= 0; i--) {
    const [label, color] = legend[i]!;
    lx -= doc.widthOfString(label);
    text(doc, label, lx, c.y - 1, { size: BODY_SIZE, color: COLOR.muted });
    lx -= 12;
    doc.rect(lx, c.y, 8, 8).fill(color);
    lx -= 14;
  }

  const axisWidth = 36;
  const plotLeft = c.left + axisWidth;
  const plotRight = c.right;
  const plotWidth = plotRight - plotLeft;
  const plotTop = c.y + 18;
  const plotHeight = chartHeight - 18 - 18;
  const plotBottom = plotTop + plotHeight;

  const peak = days.reduce((m, d) => Math.max(m, d.allowed + d.denied), 0);
  const { step, max } = yScale(peak);
  const tickCount = Math.round(max / step);

  doc.font(FONT).fontSize(7);
  for (let t = 0; t <= tickCount; t++) {
    const y = plotBottom - (t / tickCount) * plotHeight;
    doc.lineWidth(t === 0 ? 0.75 : 0.5).moveTo(plotLeft, y).lineTo(plotRight, y).stroke(t === 0 ? COLOR.rule : COLOR.grid);
    if (peak === 0 && t > 0) continue;
    const label = formatCount(t * step);
    text(doc, label, plotLeft - 5 - doc.widthOfString(label), y - 3, { size: 7, color: COLOR.muted });
  }

  const slot = days.length > 0 ? plotWidth / days.length : plotWidth;
  // Bars stay bar-shaped on short windows and touch only when a year is crammed in.
  const barWidth = Math.min(MAX_BAR_WIDTH, slot >= 6 ? slot * 0.75 : slot >= 2 ? slot * 0.8 : slot);
  if (peak > 0) {
    days.forEach((d, i) => {
      const x = plotLeft + i * slot + (slot - barWidth) / 2;
      const allowedHeight = (d.allowed / max) * plotHeight;
      const deniedHeight = (d.denied / max) * plotHeight;
      if (allowedHeight > 0) doc.rect(x, plotBottom - allowedHeight, barWidth, allowedHeight).fill(COLOR.allowed);
      if (deniedHeight > 0) doc.rect(x, plotBottom - allowedHeight - deniedHeight, barWidth, deniedHeight).fill(COLOR.denied);
    });
  } else {
    const note = 'No calls in this window';
    doc.font(FONT_ITALIC).fontSize(9);
    text(doc, note, plotLeft + (plotWidth - doc.widthOfString(note)) / 2, plotTop + plotHeight / 2 - 5, {
      font: FONT_ITALIC,
      size: 9,
      color: COLOR.muted,
    });
  }

  // Day labels (MM-DD) while a window is about two months or less, else the
  // first of each month ("Jan 2025", "Feb", ...); a label that would overlap
  // the one before is skipped.
  doc.font(FONT).fontSize(7);
  const byMonth = days.length > 62;
  let lastLabelRight = -Infinity;
  days.forEach((d, i) => {
    if (byMonth && !d.day.endsWith('-01')) return;
    const label = byMonth ? monthLabel(d.day, lastLabelRight === -Infinity) : d.day.slice(5);
    const width = doc.widthOfString(label);
    const center = plotLeft + (i + 0.5) * slot;
    const x = Math.min(Math.max(center - width / 2, plotLeft - 4), plotRight - width);
    if (x < lastLabelRight + 6) return;
    lastLabelRight = x + width;
    doc.lineWidth(0.5).moveTo(center, plotBottom).lineTo(center, plotBottom + 3).stroke(COLOR.rule);
    text(doc, label, x, plotBottom + 5, { size: 7, color: COLOR.muted });
  });

  c.y = plotBottom + 18 + SECTION_GAP - 6;
}

function drawAgentTable(c: Cursor, perAgent: AuditReportData['perAgent']): void {
  const columns: Column[] = [
    { header: 'Agent', weight: 3.4 },
    { header: 'Calls', weight: 1, align: 'right' },
    { header: 'Allowed', weight: 1, align: 'right' },
    { header: 'Denied', weight: 1, align: 'right' },
    { header: 'Deny rate', weight: 1, align: 'right' },
    { header: 'p50 latency', weight: 1.1, align: 'right' },
  ];
  const rows: Cell[][] = perAgent.map((a) => [
    toWinAnsi(a.agentName || a.agentId),
    formatCount(a.calls),
    formatCount(a.allowed),
    finite(a.denied) > 0 ? { text: formatCount(a.denied), color: COLOR.denied } : formatCount(a.denied),
    formatRate(a.denied, a.calls),
    finite(a.calls) > 0 ? formatMs(a.p50LatencyMs) : '—',
  ]);
  section(c, 'Agents', columns, rows, 'No agent made a call in this window.');
}

function drawToolTable(c: Cursor, topTools: AuditReportData['topTools']): void {
  const columns: Column[] = [
    { header: 'Tool (· MCP tool)', weight: 5 },
    { header: 'Calls', weight: 1, align: 'right' },
    { header: 'Denied', weight: 1, align: 'right' },
  ];
  const rows: Cell[][] = topTools.map((t) => [
    toWinAnsi(t.mcpTool ? `${t.toolName} · ${t.mcpTool}` : t.toolName),
    formatCount(t.calls),
    finite(t.denied) > 0 ? { text: formatCount(t.denied), color: COLOR.denied } : formatCount(t.denied),
  ]);
  section(c, 'Top tools', columns, rows, 'No tool was called in this window.');
}

function drawRecentDenied(c: Cursor, recentDenied: readonly ReportEntry[]): void {
  const columns: Column[] = [
    { header: 'Time (UTC)', weight: 1.66 },
    { header: 'Agent', weight: 1.3 },
    { header: 'Tool', weight: 1.45 },
    { header: 'Action', weight: 1.3 },
    { header: 'Rule matched', weight: 1.55 },
    { header: 'Reasoning', weight: 2.74 },
  ];
  const rows: Cell[][] = newestFirst(recentDenied).map((r) => [
    formatTime(r.timestamp),
    toWinAnsi(r.agentName || r.agentId),
    toWinAnsi(r.toolName),
    toWinAnsi(r.action),
    toWinAnsi(r.ruleMatched),
    toWinAnsi(r.reasoning),
  ]);
  section(c, 'Most recent denied calls', columns, rows, 'No call was denied in this window.');
}

function drawApprovals(c: Cursor, approvals: readonly Approval[], maxApprovals: number): void {
  const pendingFirst = [...approvals].sort((a, b) => Number(b.status === 'pending') - Number(a.status === 'pending'));
  const shown = pendingFirst.slice(0, maxApprovals);
  const columns: Column[] = [
    { header: 'Created (UTC)', weight: 1.75 },
    { header: 'Agent', weight: 1.2 },
    { header: 'Call', weight: 2.5 },
    { header: 'Status', weight: 0.85 },
    { header: 'Decided by', weight: 1.7 },
    { header: 'Decided (UTC)', weight: 1.75 },
  ];
  const rows: Cell[][] = shown.map((a) => [
    formatTime(a.createdAt),
    toWinAnsi(a.agentName || a.agentId),
    toWinAnsi(`${a.action} ${a.host}${a.path}${a.query === '' ? '' : `?${a.query}`}`),
    a.status === 'denied' || a.status === 'expired' ? { text: a.status, color: COLOR.denied } : a.status,
    toWinAnsi(a.decidedBy ?? '—'),
    a.decidedAt === null ? '—' : formatTime(a.decidedAt),
  ]);
  const note = approvals.length > shown.length ? `Showing ${formatCount(shown.length)} of them; more were made in this window (GET /approvals lists them).` : undefined;
  section(c, 'Approvals of held calls', columns, rows, 'No call was held for approval in this window.', note);
}

function drawEntries(c: Cursor, entries: readonly ReportEntry[], totalCalls: number, maxEntries: number): void {
  const cap = Number.isFinite(maxEntries) && maxEntries >= 0 ? Math.floor(maxEntries) : entries.length;
  const shown = newestFirst(entries).slice(0, cap);
  const columns: Column[] = [
    { header: 'Time (UTC)', weight: 1.6 },
    { header: 'Agent', weight: 1.75 },
    { header: 'Tool', weight: 1.75 },
    { header: 'Action', weight: 1.75 },
    { header: 'Decision', weight: 0.95 },
    { header: 'Status', weight: 0.7, align: 'right' },
    { header: 'Latency', weight: 0.95, align: 'right' },
  ];
  const rows: Cell[][] = shown.map((r) => [
    formatTime(r.timestamp),
    toWinAnsi(r.agentName || r.agentId),
    toWinAnsi(r.toolName),
    toWinAnsi(r.action),
    r.decision === 'denied' ? { text: 'denied', color: COLOR.denied } : toWinAnsi(r.decision),
    finite(r.statusCode) > 0 ? String(Math.round(finite(r.statusCode))) : '—',
    formatMs(r.latencyMs),
  ]);
  const capLine = `Showing ${formatCount(shown.length)} of ${formatCount(totalCalls)} entries (cap: ${formatCount(cap)}).`;
  section(c, 'Entries', columns, rows, 'No entries in this window.', capLine);
}

/**
 * The seals covering the window, whole. The last seal of each chain commits to
 * every earlier one of that chain (prev_hash), so when only some fit the cap,
 * the chains' last seals are among them.
 */
function drawSeals(c: Cursor, input: AuditPdfInput): void {
  const seals = input.seals ?? [];
  const count = input.sealCount ?? seals.length;
  const chains = new Set(seals.map((s) => s.writer)).size;
  sectionTitle(c, 'Seals', 60);
  const lines = [
    count === 0
      ? 'No seal covers this window.'
      : seals.length < count
        ? `${formatCount(count)} seals cover this window; the newest ${formatCount(seals.length)} are printed (they hold the last seal of each chain still writing at its end, which commits to the chain's earlier seals; GET /audit/seals lists all).`
        : `${formatCount(count)} seal${count === 1 ? '' : 's'} in ${formatCount(chains)} chain${chains === 1 ? '' : 's'} cover this window.`,
    `Signing key fingerprint (SHA-256 of the public key, SPKI DER): ${input.keyFingerprint ?? 'unknown'}`,
    'To verify: fetch GET /audit/public-key and check its fingerprint is the one above; then GET /audit/verify with this',
    `window (since=${isoMillis(input.since)}, until=${isoMillis(input.until)}), or offline: npm run verify-audit -- --since ... --until ...`,
    '--public-key key.pem. Each seal_hash is the SHA-256, and each signature the Ed25519 signature, of the seal\'s RFC 8785',
    'canonical JSON (docs/api.md, "Tamper-evident audit"); root is the RFC 6962 Merkle root of its entries\' entry_hash values.',
  ];
  c.doc.font(FONT).fontSize(BODY_SIZE);
  for (const line of lines.flatMap((l) => wrapWords(c.doc, toWinAnsi(l), c.width))) {
    ensureSpace(c, 12);
    text(c.doc, line, c.left, c.y, { size: BODY_SIZE, color: COLOR.muted });
    c.y += 11;
  }
  c.y += 6;
  for (const s of seals) {
    const block = [
      `seal ${s.id}  writer ${s.writer}  seq ${s.seq}`,
      `entries ${s.count}  from ${s.firstAt}  to ${s.lastAt}  batch ${s.batchId}`,
      `root      ${s.root}`,
      `prev_hash ${s.prevHash}`,
      `seal_hash ${s.sealHash}`,
      `signature ${s.signature}`,
    ];
    ensureSpace(c, block.length * MONO_LINE + 6);
    for (const line of block) {
      text(c.doc, toWinAnsi(line), c.left, c.y, { font: FONT_MONO, size: MONO_SIZE });
      c.y += MONO_LINE;
    }
    c.y += 6;
  }
}

function drawFooters(doc: PDFKit.PDFDocument, orgName: string): void {
  const range = doc.bufferedPageRange();
  for (let i = range.start; i < range.start + range.count; i++) {
    doc.switchToPage(i);
    const y = doc.page.height - MARGIN + 16;
    const right = doc.page.width - MARGIN;
    doc.lineWidth(0.5).moveTo(MARGIN, y - 6).lineTo(right, y - 6).stroke(COLOR.rule);
    const pageLabel = `Page ${i - range.start + 1} of ${range.count}`;
    doc.font(FONT).fontSize(7.5);
    const pageLabelWidth = doc.widthOfString(pageLabel);
    const left = fit(doc, `${AUTHOR} audit report · ${orgName}`, right - MARGIN - pageLabelWidth - 12);
    text(doc, left, MARGIN, y, { size: 7.5, color: COLOR.muted });
    text(doc, pageLabel, right - pageLabelWidth, y, { size: 7.5, color: COLOR.muted });
  }
}

// ---------------------------------------------------------------------------
// Layout

function newPage(c: Cursor): void {
  c.doc.addPage();
  c.y = c.top;
}

/** Starts a new page unless `height` more points fit on this one. */
function ensureSpace(c: Cursor, height: number): void {
  if (c.y + height > c.bottom && c.y > c.top) newPage(c);
}

function sectionTitle(c: Cursor, title: string, keepWithHeight: number): void {
  ensureSpace(c, SECTION_TITLE_HEIGHT + keepWithHeight);
  text(c.doc, title, c.left, c.y, { font: FONT_BOLD, size: 12 });
  c.y += SECTION_TITLE_HEIGHT;
}

/**
 * A titled table. The header row is repeated on every page the table reaches,
 * and a row is only drawn where it fits above the bottom margin.
 */
function section(c: Cursor, title: string, columns: Column[], rows: Cell[][], emptyText: string, note?: string): void {
  const { doc } = c;
  const noteHeight = note === undefined ? 0 : 14;
  const keptRows = Math.max(1, Math.min(rows.length, ROWS_KEPT_WITH_TITLE));
  sectionTitle(c, title, noteHeight + HEADER_ROW_HEIGHT + keptRows * ROW_HEIGHT);
  if (note !== undefined) {
    doc.font(FONT).fontSize(BODY_SIZE);
    text(doc, fit(doc, note, c.width), c.left, c.y - 4, { size: BODY_SIZE, color: COLOR.muted });
    c.y += noteHeight;
  }

  const totalWeight = columns.reduce((sum, col) => sum + col.weight, 0);
  const widths = columns.map((col) => (col.weight / totalWeight) * c.width);
  const xs: number[] = [];
  widths.reduce((x, w) => (xs.push(x), x + w), c.left);

  const drawHeader = (continued: boolean): void => {
    if (continued) {
      text(doc, `${title} (continued)`, c.left, c.y, { font: FONT_BOLD, size: 9, color: COLOR.muted });
      c.y += 16;
    }
    doc.rect(c.left, c.y, c.width, HEADER_ROW_HEIGHT).fill(COLOR.headerFill);
    doc.font(FONT_BOLD).fontSize(HEADER_SIZE);
    columns.forEach((col, i) => {
      drawCell(doc, col.header, xs[i]!, widths[i]!, c.y + 5, col.align ?? 'left', FONT_BOLD, HEADER_SIZE, COLOR.text);
    });
    c.y += HEADER_ROW_HEIGHT;
  };

  drawHeader(false);
  if (rows.length === 0) {
    doc.font(FONT_ITALIC).fontSize(BODY_SIZE);
    text(doc, emptyText, c.left + CELL_PAD, c.y + 4, { font: FONT_ITALIC, size: BODY_SIZE, color: COLOR.muted });
    c.y += ROW_HEIGHT;
  }
  rows.forEach((row, r) => {
    if (c.y + ROW_HEIGHT > c.bottom) {
      newPage(c);
      drawHeader(true);
    }
    if (r % 2 === 1) doc.rect(c.left, c.y, c.width, ROW_HEIGHT).fill(COLOR.zebra);
    doc.font(FONT).fontSize(BODY_SIZE);
    columns.forEach((col, i) => {
      const cell = row[i] ?? '';
      const value = typeof cell === 'string' ? cell : cell.text;
      const color = typeof cell === 'string' ? COLOR.text : cell.color;
      drawCell(doc, value, xs[i]!, widths[i]!, c.y + 3.5, col.align ?? 'left', FONT, BODY_SIZE, color);
    });
    c.y += ROW_HEIGHT;
  });
  hRule(c, c.y, COLOR.rule, 0.5);
  c.y += SECTION_GAP;
}

/** One cell, cut to its column; the caller has set the font that `fit` measures with. */
function drawCell(
  doc: PDFKit.PDFDocument,
  value: string,
  x: number,
  width: number,
  y: number,
  align: Align,
  font: string,
  size: number,
  color: string,
): void {
  const inner = width - 2 * CELL_PAD;
  const shown = fit(doc, value, inner);
  if (shown === '') return;
  const textX = align === 'right' ? x + width - CELL_PAD - doc.widthOfString(shown) : x + CELL_PAD;
  text(doc, shown, textX, y, { font, size, color });
}

function hRule(c: Cursor, y: number, color: string, lineWidth: number): void {
  c.doc.lineWidth(lineWidth).moveTo(c.left, y).lineTo(c.right, y).stroke(color);
}

/** Draws one line at (x, y) that pdfkit will neither wrap nor move to a new page. */
function text(
  doc: PDFKit.PDFDocument,
  value: string,
  x: number,
  y: number,
  style: { font?: string; size?: number; color?: string },
): void {
  doc
    .font(style.font ?? FONT)
    .fontSize(style.size ?? BODY_SIZE)
    .fillColor(style.color ?? COLOR.text)
    .text(value, x, y, { lineBreak: false });
}

const ELLIPSIS = '…';

/** `value` in lines of at most `maxWidth` in the document's current font, broken at spaces (a longer word keeps its own line). */
function wrapWords(doc: PDFKit.PDFDocument, value: string, maxWidth: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of value.split(' ')) {
    const candidate = line === '' ? word : `${line} ${word}`;
    if (line !== '' && doc.widthOfString(candidate) > maxWidth) {
      lines.push(line);
      line = word;
    } else {
      line = candidate;
    }
  }
  lines.push(line);
  return lines;
}

/**
 * The longest prefix of `value` that fits `maxWidth` in the current font, with
 * an ellipsis when cut. `value` must already be WinAnsi-safe.
 */
function fit(doc: PDFKit.PDFDocument, value: string, maxWidth: number): string {
  if (maxWidth <= 0) return '';
  // The quote is the narrowest Helvetica glyph (0.191 em; 0.8 leaves room for
  // kerning), so a longer string cannot fit: cutting first keeps the measuring
  // cheap on a long reasoning string.
  const maxChars = Math.ceil(maxWidth / (doc.widthOfString("'") * 0.8)) + 1;
  let candidate = value.length > maxChars ? value.slice(0, maxChars) : value;
  if (candidate === value && doc.widthOfString(value) <= maxWidth) return value;
  const ellipsisWidth = doc.widthOfString(ELLIPSIS);
  if (ellipsisWidth > maxWidth) return '';
  let lo = 0;
  let hi = candidate.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (doc.widthOfString(candidate.slice(0, mid)) + ellipsisWidth <= maxWidth) lo = mid;
    else hi = mid - 1;
  }
  candidate = candidate.slice(0, lo).trimEnd();
  return candidate + ELLIPSIS;
}

// ---------------------------------------------------------------------------
// Values

/** The Unicode code points, beyond Latin-1, that WinAnsi (CP1252) has glyphs for. */
const WIN_ANSI_EXTRA = new Set([
  0x152, 0x153, 0x160, 0x161, 0x178, 0x17d, 0x17e, 0x192, 0x2c6, 0x2dc, 0x2013, 0x2014, 0x2018, 0x2019, 0x201a,
  0x201c, 0x201d, 0x201e, 0x2020, 0x2021, 0x2022, 0x2026, 0x2030, 0x2039, 0x203a, 0x20ac, 0x2122,
]);

/** Longest string kept before cutting to a column; no A4 column holds more. The store cuts `reasoning` to as many (REPORT_TEXT_CHARS, audit-codec.ts, which this worker does not load). */
const MAX_INPUT_CHARS = 2000;

/**
 * `value` as one line Helvetica can draw: whitespace controls become spaces,
 * anything outside WinAnsi becomes '?', one '?' per code point.
 */
function toWinAnsi(value: unknown): string {
  let s = typeof value === 'string' ? value : value === null || value === undefined ? '' : String(value);
  if (s.length > MAX_INPUT_CHARS) s = s.slice(0, MAX_INPUT_CHARS);
  // NFC turns "e" + combining acute into "é", which WinAnsi has.
  s = s.normalize('NFC');
  let ascii = true;
  for (let i = 0; i < s.length; i++) {
    const code = s.charCodeAt(i);
    if (code < 0x20 || code > 0x7e) {
      ascii = false;
      break;
    }
  }
  if (ascii) return s;
  let out = '';
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if ((cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xff) || WIN_ANSI_EXTRA.has(cp)) out += ch;
    else if (cp === 0x09 || cp === 0x0a || cp === 0x0d) out += ' ';
    else out += '?';
  }
  return out;
}

interface DayBucket {
  day: string;
  allowed: number;
  denied: number;
}

/**
 * One bucket per UTC day the window touches, oldest first; days the store
 * returned no row for are empty. Days the store returned outside the window are
 * kept so that nothing counted goes missing from the chart.
 */
function dayBuckets(since: Date, until: Date, perDay: AuditReportData['perDay']): DayBucket[] {
  const counts = new Map<string, { allowed: number; denied: number }>();
  for (const d of perDay) {
    if (typeof d?.day !== 'string' || !/^\d{4}-\d{2}-\d{2}$/.test(d.day)) continue;
    const prior = counts.get(d.day) ?? { allowed: 0, denied: 0 };
    prior.allowed += Math.max(0, finite(d.allowed));
    prior.denied += Math.max(0, finite(d.denied));
    counts.set(d.day, prior);
  }

  const starts: number[] = [];
  const ends: number[] = [];
  if (isValidDate(since) && isValidDate(until) && since.getTime() < until.getTime()) {
    starts.push(utcDayStart(since.getTime()));
    ends.push(utcDayStart(until.getTime() - 1));
  }
  for (const day of counts.keys()) {
    const t = Date.parse(`${day}T00:00:00Z`);
    if (Number.isFinite(t)) {
      starts.push(t);
      ends.push(t);
    }
  }
  if (starts.length === 0) return [];
  let first = Math.min(...starts);
  const last = Math.max(...ends);
  if ((last - first) / DAY_MS + 1 > MAX_CHART_DAYS) first = last - (MAX_CHART_DAYS - 1) * DAY_MS;

  const buckets: DayBucket[] = [];
  for (let t = first; t <= last; t += DAY_MS) {
    const day = new Date(t).toISOString().slice(0, 10);
    const c = counts.get(day);
    buckets.push({ day, allowed: c?.allowed ?? 0, denied: c?.denied ?? 0 });
  }
  return buckets;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** `2025-01-01` → `Jan 2025`; other months without the year unless `withYear`. */
function monthLabel(day: string, withYear: boolean): string {
  const month = MONTHS[Number(day.slice(5, 7)) - 1] ?? day.slice(5, 7);
  return withYear || month === 'Jan' ? `${month} ${day.slice(0, 4)}` : month;
}

function utcDayStart(ms: number): number {
  return Math.floor(ms / DAY_MS) * DAY_MS;
}

/**
 * A y-axis of about four steps of 1, 2, 2.5 or 5 × 10^k whole calls, and at
 * least four gridlines of one call each when the busiest day has fewer.
 */
function yScale(peak: number): { step: number; max: number } {
  if (!(peak > 4)) return { step: 1, max: 4 };
  const rough = peak / 4;
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  const step = Math.max(1, [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= rough) ?? 10 * magnitude);
  const wholeStep = Number.isInteger(step) ? step : Math.ceil(step);
  return { step: wholeStep, max: wholeStep * Math.max(1, Math.ceil(peak / wholeStep)) };
}

function newestFirst(records: readonly ReportEntry[]): ReportEntry[] {
  const key = (r: ReportEntry): string => (typeof r?.timestamp === 'string' ? r.timestamp : '');
  return [...records].sort((a, b) => (key(a) < key(b) ? 1 : key(a) > key(b) ? -1 : 0));
}

function finite(n: unknown): number {
  return typeof n === 'number' && Number.isFinite(n) ? n : 0;
}

function isValidDate(d: unknown): d is Date {
  return d instanceof Date && Number.isFinite(d.getTime());
}

const COUNT_FORMAT = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** A count; a negative or non-finite one (never valid) shows as 0. */
function formatCount(n: unknown): string {
  return COUNT_FORMAT.format(Math.max(0, finite(n)));
}

/** Percent with one decimal; '—' when there were no calls to divide by. */
function formatRate(denied: unknown, calls: unknown): string {
  const total = finite(calls);
  if (total <= 0) return '—';
  return `${((finite(denied) / total) * 100).toFixed(1)}%`;
}

function formatMs(ms: unknown): string {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return '—';
  return ms >= 100 ? `${COUNT_FORMAT.format(Math.round(ms))} ms` : `${Number(ms.toFixed(1))} ms`;
}

/** `2025-03-14T12:34:56.789Z` → `2025-03-14 12:34:56`. */
function formatTime(timestamp: unknown): string {
  if (typeof timestamp === 'string') {
    const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(timestamp);
    if (m) return `${m[1]} ${m[2]}`;
  }
  const t = typeof timestamp === 'string' || typeof timestamp === 'number' ? new Date(timestamp) : null;
  if (t && isValidDate(t)) return t.toISOString().slice(0, 19).replace('T', ' ');
  return toWinAnsi(timestamp);
}

function isoMillis(d: unknown): string {
  return isValidDate(d) ? d.toISOString() : '—';
}

function isoSeconds(d: unknown): string {
  return isValidDate(d) ? `${d.toISOString().slice(0, 19)}Z` : '—';
}

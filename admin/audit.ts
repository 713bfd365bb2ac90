// Audit: write one entry (POST /audit), list with filters, export as PDF.
import { randomUUID } from 'node:crypto';
import { GuardError } from '../shared/errors.js';
import { auditJson, entryHash, wellFormed } from '../shared/audit/entry-json.js';
import { NO_PROXY_DETAIL, type AuditDecision, type AuditRecord } from '../shared/types.js';
import type { Caller } from './auth.js';
import type { AdminContext, Handler } from './context.js';
import { enumField, integerField, json, queryInteger, readJsonObject, stringField, type AdminResponse } from './http.js';
import { requireAgent } from './agents.js';
import { createPdfRenderer, type PdfRenderer } from './report/pdf-renderer.js';
import { auditFilterFromQuery } from './audit-filter.js';
import { windowOf } from './audit-seals.js';
import { JOBS_WAITING_MAX, JOBS_WAITING_PER_ORG, OneAtATime } from './one-at-a-time.js';
import type { Seal } from '../shared/audit/seal.js';

const DECISIONS: readonly AuditDecision[] = ['allowed', 'denied'];
export const AUDIT_LIMIT_DEFAULT = 50;
export const AUDIT_LIMIT_MAX = 1000;
export const AUDIT_OFFSET_MAX = 1_000_000;
/** The agents GET /audit/summary lists, most calls first (agents_total counts them all). */
export const SUMMARY_AGENTS_MAX = 1000;
export const PDF_DAYS_DEFAULT = 7;
export const PDF_DAYS_MAX = 365;
/** Approvals listed in a PDF report, at most (pending first). */
export const PDF_APPROVALS_MAX = 200;
/** Seals printed in full in a PDF report, at most (the last of each chain always). */
export const PDF_SEALS_MAX = 100;
const INT32_MAX = 2_147_483_647;



/**
 * At most `max` seals, oldest first: the last of each chain (it commits to the
 * chain's earlier seals), then the newest others.
 */
export function sealsToPrint(seals: readonly Seal[], max: number): Seal[] {
  const lastOfChain = new Map<string, Seal>();
  for (const s of seals) if ((lastOfChain.get(s.writer)?.seq ?? -1) < s.seq) lastOfChain.set(s.writer, s);
  const chosen = new Set([...lastOfChain.values()].slice(0, max));
  const newestFirst = [...seals].sort((a, b) => (a.lastAt < b.lastAt ? 1 : a.lastAt > b.lastAt ? -1 : 0));
  for (const s of newestFirst) {
    if (chosen.size >= max) break;
    chosen.add(s);
  }
  return [...chosen].sort((a, b) => (a.firstAt < b.firstAt ? -1 : a.firstAt > b.firstAt ? 1 : a.seq - b.seq));
}

/** GET /audit's array around its slices (each slice's entries written as they come). */
const OPEN_BRACKET = Buffer.from('[');
const CLOSE_BRACKET = Buffer.from(']');

export function auditHandlers(ctx: AdminContext) {
  let pdfRenderer: PdfRenderer | null = null;
  const reports = new OneAtATime('PDF reports', JOBS_WAITING_MAX, JOBS_WAITING_PER_ORG);

  const write: Handler = async (req, caller) => {
    const body = readJsonObject(req);
    const agentId = stringField(body, 'agent_id');
    const toolName = stringField(body, 'tool_name', { min: 1, max: 1024 });
    const action = stringField(body, 'action', { min: 1, max: 32 });
    const decision = enumField(body, 'decision', DECISIONS);
    const toolUrl = stringField(body, 'tool_url', { optional: true, max: 8192 }) ?? '';
    const reasoning = stringField(body, 'reasoning', { optional: true, max: 65536 }) ?? '';
    const taskId = stringField(body, 'task_id', { optional: true, max: 1024 }) ?? '';
    const latencyMs = integerField(body, 'latency_ms', INT32_MAX) ?? 0;
    const statusCode = integerField(body, 'status_code', 999) ?? 0;
    const agent = await requireAgent(ctx, caller.orgId, agentId);
    const record: AuditRecord = {
      id: randomUUID(),
      timestamp: new Date().toISOString(),
      orgId: caller.orgId,
      agentId: agent.id,
      agentName: agent.name,
      // As the store will keep them (UTF-8: a lone surrogate becomes U+FFFD), so that the answer is the entry GET returns and its hash verifies.
      toolName: wellFormed(toolName),
      action: wellFormed(action),
      toolUrl: wellFormed(toolUrl),
      decision,
      reasoning: wellFormed(reasoning),
      taskId: wellFormed(taskId),
      latencyMs,
      statusCode,
      ruleMatched: '',
      source: 'api',
      requestBytes: 0,
      responseBytes: 0,
      outputHash: null,
      output: null,
      outputTruncated: false,
      requestId: randomUUID(),
      ...NO_PROXY_DETAIL,
    };
    record.entryHash = entryHash(record);
    try {
      await ctx.auditBatcher.enqueueDurable(record);
    } catch {
      throw new GuardError('unavailable', 'The audit store cannot accept entries now; retry later.');
    }
    return json(201, auditJson(record));
  };

  const list: Handler = async (req, caller) => {
    const q = req.query;
    const filter = auditFilterFromQuery(q);
    const limit = queryInteger(q, 'limit', AUDIT_LIMIT_DEFAULT, 1, AUDIT_LIMIT_MAX);
    const offset = queryInteger(q, 'offset', 0, 0, AUDIT_OFFSET_MAX);
    // Each slice of the page is written as it comes (the store reads a large page in slices): the whole never sits in memory as objects.
    const pieces: Buffer[] = [];
    const total = await ctx.auditStore.listInSlices(caller.orgId, filter, limit, offset, (rows) => {
      if (rows.length > 0) pieces.push(Buffer.from(`${pieces.length === 0 ? '' : ','}${JSON.stringify(rows.map(auditJson)).slice(1, -1)}`, 'utf8'));
    });
    return { status: 200, headers: { 'content-type': 'application/json', 'x-total-count': String(total) }, body: [OPEN_BRACKET, ...pieces, CLOSE_BRACKET] };
  };

  /** GET /audit/summary: the console's overview, counted by the store over the whole window (not from pages of entries). */
  const summary: Handler = async (req, caller) => {
    const { since, until } = windowOf(req.query);
    const found = await ctx.auditStore.summary(caller.orgId, since, until, SUMMARY_AGENTS_MAX);
    return json(200, {
      since: since.toISOString(),
      until: until.toISOString(),
      calls: found.calls,
      denied: found.denied,
      agents_total: found.agentsTotal,
      agents: found.agents.map((a) => ({ agent_id: a.agentId, agent_name: a.agentName, calls: a.calls, denied: a.denied, p95_latency_ms: a.p95LatencyMs })),
    });
  };

  const exportPdf: Handler = async (req, caller) => {
    const days = queryInteger(req.query, 'days', PDF_DAYS_DEFAULT, 1, PDF_DAYS_MAX);
    // Its reads included (the worker renders one at a time already): each parses up to PDF_MAX_ENTRIES rows on the event loop.
    return reports.run(caller.orgId, () => buildPdf(caller, days), req.signal);
  };

  const buildPdf = async (caller: Caller, days: number): Promise<AdminResponse> => {
    const until = new Date();
    const since = new Date(until.getTime() - days * 86_400_000);
    const data = await ctx.auditStore.report(caller.orgId, since, until, ctx.config.pdfMaxEntries, 10);
    const user = await ctx.store.findUserById(caller.userId);
    // Pending ones first (however old in the window), then the newest; one more than shown, so that the report can say that more exist.
    const window = { createdSince: since.toISOString(), createdUntil: until.toISOString(), limit: PDF_APPROVALS_MAX + 1 };
    const [pending, newest] = await Promise.all([ctx.store.listApprovals(caller.orgId, { ...window, status: 'pending' }), ctx.store.listApprovals(caller.orgId, window)]);
    const approvals = [...pending, ...newest.filter((a) => a.status !== 'pending')];
    const [seals, sealCount] = await Promise.all([ctx.auditStore.listSeals(caller.orgId, { since, until }, PDF_SEALS_MAX, true), ctx.auditStore.countSeals(caller.orgId, { since, until })]);
    // In a worker thread, started on first use: the event loop that serves calls
    // never renders, and pdfkit (~15 MB) loads only where a report is asked for.
    pdfRenderer ??= createPdfRenderer();
    const pdf = await pdfRenderer.render({
      orgName: user?.email ?? caller.orgId,
      orgId: caller.orgId,
      since,
      until,
      days,
      generatedAt: until,
      maxEntries: ctx.config.pdfMaxEntries,
      data,
      approvals,
      maxApprovals: PDF_APPROVALS_MAX,
      seals: sealsToPrint(seals, PDF_SEALS_MAX),
      sealCount,
      keyFingerprint: ctx.signingKey.fingerprint,
    });
    return {
      status: 200,
      headers: {
        'content-type': 'application/pdf',
        'content-disposition': `attachment; filename="audit-${until.toISOString().slice(0, 10)}.pdf"`,
        'cache-control': 'no-store',
      },
      body: pdf,
    };
  };

  return { write, list, summary, exportPdf, close: async () => pdfRenderer?.close() };
}

// The admin API: one route table (also read by the BOLA sweep and the docs test),
// one dispatcher that authenticates, runs the handler and turns every error into
// the contract's body.
import { GuardError, isStoreUnavailable, toErrorResponse } from '../shared/errors.js';
import type { Logger } from '../shared/log.js';
import { agentHandlers } from './agents.js';
import { approvalHandlers } from './approvals.js';
import { auditHandlers } from './audit.js';
import { auditSealHandlers } from './audit-seals.js';
import { auditStreamHandler, AuditStreamHub } from './audit-stream.js';
import { loadConsole } from './console.js';
import { createAuth } from './auth.js';
import type { AdminContext, Handler } from './context.js';
import { credentialHandlers } from './credentials.js';
import type { AdminRequest, AdminResponse } from './http.js';
import { policyHandlers } from './policy.js';

/** One row of the route table: what the dispatcher matches, without the handler. */
export interface RouteSpec {
  method: 'GET' | 'POST' | 'DELETE';
  /** `:name` matches one path segment. */
  pattern: string;
  /** false for the routes under /auth/. */
  auth: boolean;
}

export interface Route extends RouteSpec {
  handler: Handler;
}

/**
 * Every admin route, as data (no handlers), so the BOLA sweep and the docs test
 * can read it without starting an app. `handler` names the entry of the handler
 * map in `createAdminApp`; the compiler checks that every name has a handler.
 */
export const ROUTE_TABLE = [
  { method: 'POST', pattern: '/auth/signup', auth: false, handler: 'auth.signup' },
  { method: 'POST', pattern: '/auth/login', auth: false, handler: 'auth.login' },
  { method: 'GET', pattern: '/agents', auth: true, handler: 'agents.list' },
  { method: 'POST', pattern: '/agents', auth: true, handler: 'agents.create' },
  { method: 'GET', pattern: '/agents/:id/proxy-url', auth: true, handler: 'agents.proxyUrl' },
  { method: 'DELETE', pattern: '/agents/:id', auth: true, handler: 'agents.remove' },
  { method: 'GET', pattern: '/agents/:id/policy', auth: true, handler: 'policy.get' },
  { method: 'POST', pattern: '/agents/:id/policy', auth: true, handler: 'policy.set' },
  { method: 'GET', pattern: '/credentials', auth: true, handler: 'credentials.list' },
  { method: 'POST', pattern: '/credentials', auth: true, handler: 'credentials.create' },
  { method: 'DELETE', pattern: '/credentials/:id', auth: true, handler: 'credentials.remove' },
  { method: 'POST', pattern: '/policy/check', auth: true, handler: 'policy.check' },
  { method: 'POST', pattern: '/policy/replay', auth: true, handler: 'policy.replay' },
  { method: 'POST', pattern: '/audit', auth: true, handler: 'audit.write' },
  { method: 'GET', pattern: '/audit', auth: true, handler: 'audit.list' },
  { method: 'GET', pattern: '/audit/summary', auth: true, handler: 'audit.summary' },
  { method: 'GET', pattern: '/audit/export/pdf', auth: true, handler: 'audit.exportPdf' },
  { method: 'GET', pattern: '/audit/public-key', auth: true, handler: 'audit.publicKey' },
  { method: 'GET', pattern: '/audit/seals', auth: true, handler: 'audit.seals' },
  { method: 'GET', pattern: '/audit/verify', auth: true, handler: 'audit.verify' },
  { method: 'GET', pattern: '/audit/stream', auth: true, handler: 'audit.stream' },
  { method: 'GET', pattern: '/approvals', auth: true, handler: 'approvals.list' },
  { method: 'GET', pattern: '/approvals/:id', auth: true, handler: 'approvals.get' },
  { method: 'POST', pattern: '/approvals/:id/approve', auth: true, handler: 'approvals.approve' },
  { method: 'POST', pattern: '/approvals/:id/deny', auth: true, handler: 'approvals.deny' },
] as const satisfies readonly (RouteSpec & { handler: string })[];

type HandlerName = (typeof ROUTE_TABLE)[number]['handler'];

interface CompiledRoute extends Route {
  regex: RegExp;
  names: string[];
}

export interface AdminApp {
  routes: readonly Route[];
  handle(req: AdminRequest): Promise<AdminResponse>;
  /** Ends the open streams (GET /audit/stream) at once: shutdown's first step, so that no stream holds the drain. */
  endStreams(): void;
  /** Stops what the admin side started (the PDF worker, the stream poller). */
  close(): Promise<void>;
}

export function createAdminApp(ctx: AdminContext, log: Logger): AdminApp {
  const auth = createAuth({
    store: ctx.store,
    jwtSecret: ctx.secrets.jwtSecret,
    jwtTtlSeconds: ctx.config.jwtTtlSeconds,
    loginMaxFailures: ctx.config.loginMaxFailures,
    loginWindowSeconds: ctx.config.loginWindowSeconds,
    signupMax: ctx.config.signupMaxPerAddress,
    signupWindowSeconds: ctx.config.signupWindowSeconds,
  });
  const agents = agentHandlers(ctx);
  const credentials = credentialHandlers(ctx);
  const policy = policyHandlers(ctx);
  const audit = auditHandlers(ctx);
  const approvals = approvalHandlers(ctx);
  const auditSeals = auditSealHandlers(ctx);
  const auditStream = new AuditStreamHub({
    store: ctx.auditStore,
    pollMs: ctx.config.auditStreamPollMs,
    maxPerOrg: ctx.config.auditStreamsPerOrg,
    maxStreams: ctx.config.auditStreamsMax,
    keepaliveMs: ctx.config.auditStreamKeepaliveMs,
    log,
  });
  // Not in ROUTE_TABLE: static files without auth, outside the API the BOLA sweep and docs tests read.
  const consoleFiles = loadConsole();

  const handlers: Record<HandlerName, Handler> = {
    'auth.signup': (req) => auth.signup(req),
    'auth.login': (req) => auth.login(req),
    'agents.list': agents.list,
    'agents.create': agents.create,
    'agents.proxyUrl': agents.proxyUrl,
    'agents.remove': agents.remove,
    'policy.get': policy.get,
    'policy.set': policy.set,
    'policy.check': policy.check,
    'policy.replay': policy.replay,
    'credentials.list': credentials.list,
    'credentials.create': credentials.create,
    'credentials.remove': credentials.remove,
    'audit.write': audit.write,
    'audit.list': audit.list,
    'audit.summary': audit.summary,
    'audit.exportPdf': audit.exportPdf,
    'audit.publicKey': auditSeals.publicKey,
    'audit.seals': auditSeals.seals,
    'audit.verify': auditSeals.verify,
    'audit.stream': auditStreamHandler(auditStream),
    'approvals.list': approvals.list,
    'approvals.get': approvals.get,
    'approvals.approve': approvals.approve,
    'approvals.deny': approvals.deny,
  };
  const routes: Route[] = ROUTE_TABLE.map(({ method, pattern, auth: needsAuth, handler }) => ({
    method,
    pattern,
    auth: needsAuth,
    handler: handlers[handler],
  }));
  const compiled: CompiledRoute[] = routes.map((route) => {
    const names: string[] = [];
    const source = route.pattern.replace(/:([a-z]+)/g, (_m, name: string) => {
      names.push(name);
      return '([^/]+)';
    });
    return { ...route, regex: new RegExp(`^${source}/?$`), names };
  });

  async function dispatch(req: AdminRequest): Promise<AdminResponse> {
    const page = consoleFiles.serve(req);
    if (page !== null) return page;
    let allowed: string[] | null = null;
    for (const route of compiled) {
      const m = route.regex.exec(req.path);
      if (!m) continue;
      // HEAD is answered as GET without the body (RFC 9110 §9.3.2).
      if (route.method !== req.method && !(req.method === 'HEAD' && route.method === 'GET')) {
        (allowed ??= []).push(route.method);
        continue;
      }
      const params: Record<string, string> = {};
      route.names.forEach((name, i) => {
        params[name] = safeDecode(m[i + 1]!);
      });
      const caller = route.auth ? await auth.authenticate(req) : { userId: '', orgId: '' };
      return route.handler(req, caller, params);
    }
    if (allowed) {
      if (allowed.includes('GET')) allowed.push('HEAD');
      throw new GuardError('method_not_allowed', undefined, undefined, { allow: allowed.join(', ') });
    }
    throw new GuardError('not_found', 'No such endpoint.');
  }

  async function handle(req: AdminRequest): Promise<AdminResponse> {
    try {
      return await dispatch(req);
    } catch (err) {
      if (!(err instanceof GuardError)) log.error('admin request failed', { method: req.method, path: req.path, err });
      // An answer whose client left (a heavy job it waited for, skipped) is read by no one: not a failure to report.
      else if (err.status >= 500 && req.signal?.aborted !== true) log.warn('admin request failed', { method: req.method, path: req.path, code: err.code });
      const storeDown = isStoreUnavailable(err);
      if (storeDown && ctx.metrics) ctx.metrics.storeErrors++;
      const { status, body, headers } = toErrorResponse(storeDown ? new GuardError('unavailable') : err);
      return { status, headers: { 'content-type': 'application/json', ...headers }, body };
    }
  }

  return {
    routes,
    handle,
    endStreams: () => auditStream.close(),
    close: async () => {
      auditStream.close();
      await audit.close();
    },
  };
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

// One proxied call: the context object every stage fills in, in the order a request
// meets them (pipeline.ts lists them), and the one place that answers the client
// and builds the audit record at the end of the exchange.
import { isUtf8 } from 'node:buffer';
import { createHash, hash as oneShotHash, randomUUID, type Hash } from 'node:crypto';
import type { HttpResponse } from 'uWebSockets.js';
import { isoOfMs } from '../shared/audit/ch-instant.js';
import { ERRORS, errorBody, type ErrorCode } from '../shared/errors.js';
import { APPROVAL_ID_HEADER, PROXY_ALLOW, REQUEST_DROP, isApiKey, statusLine } from '../shared/http.js';
import { hashApiKey } from '../shared/secrets.js';
import { answerCarriesBody, endAnswer } from '../shared/uws-write.js';
import type { CompiledPolicy, CompiledRule, McpCall, PolicyDecision } from '../shared/policy/index.js';
import type { Agent, Approval, AuditDecision, AuditRecord } from '../shared/types.js';
import type { InjectedCredential } from './caches.js';
import type { RequestBody } from './request-body.js';
import type { ParsedTarget } from '../shared/target.js';

const EMPTY_SHA256 = oneShotHash('sha256', '', 'hex');

/** Agent annotations are cut to these lengths before they are audited. */
export const MAX_REASONING_CHARS = 16 * 1024;
const MAX_TASK_ID_CHARS = 1024;
/** Longer session ids are forwarded but not recorded (the MCP spec has them visible ASCII; ours bounds the column). */
const MAX_MCP_SESSION_ID_CHARS = 256;
const MAX_REQUEST_ID_CHARS = 200;
const NON_ASCII = /[^\x00-\x7f]/;
const PROXY_PREFIX_LENGTH = '/proxy/'.length;

/** A stage: done (undefined), answered the client and stopped (false), or later (a Promise). */
export type StageResult = undefined | false | Promise<undefined | false>;

/**
 * Every stage of the pipeline has this shape, built once by its `createX(deps)`:
 * it reads and fills in the exchange, and answers the client itself when it
 * refuses the call.
 */
export type Stage = (ex: ProxyExchange) => StageResult;

/** Why the proxy ends a call it had let through: the drain deadline of a shutdown, or its agent deleted. */
export type EndReason = 'shutdown' | 'agent_deleted';

/** The upstream request's abort reason (never sent anywhere; undici's error). */
export const END_REASONS: Readonly<Record<EndReason, string>> = { shutdown: 'shutting down', agent_deleted: 'agent deleted' };

/** The answer to a call ended before its response began: 503 at shutdown, 401 once its agent is deleted (as for any unknown key). */
export function answerEnded(ex: ProxyExchange, why: EndReason, decision: AuditDecision): void {
  if (why === 'shutdown') ex.answerError('unavailable', 'The service is shutting down; retry.', undefined, decision, true);
  else ex.answerError('invalid_api_key', undefined, undefined, decision, true);
}

export class ProxyExchange {
  readonly res: HttpResponse;
  readonly id = randomUUID();
  readonly startedAt = performance.now();
  /** Its slot in the pipeline's InFlight list (in-flight.ts), -1 when not in it. */
  inFlightSlot = -1;
  readonly timestamp = Date.now();

  // From the request head (copied before the handler returns: uWS frees the request after).
  method = '';
  keyHash = '';
  keyPrefix = '';
  /** The target as the agent wrote it: `host[:port]/path`, and the raw query. */
  rawTarget = '';
  query = '';
  /** Headers to forward, as a flat [name, value, ...] list (hop-by-hop and X-Agent-* removed). */
  headers: string[] = [];
  reasoning = '';
  taskId = '';
  requestId = '';
  /** The agent sent an X-Request-Id (kept even when too long to record). */
  hasRequestId = false;
  /** The request's Content-Length, or -1 when it has none (no body, or chunked). */
  contentLength = -1;
  /** Transfer-Encoding: chunked (a body of unknown length). */
  chunked = false;
  /** A request-head problem found while copying it (answered once the agent is known). */
  headError: { code: ErrorCode; message: string } | null = null;
  body: RequestBody | null = null;

  // Filled in by the stages.
  agent: Agent | null = null;
  target: ParsedTarget | null = null;
  /** The target path as the policy sees it (see normalizePolicyPath). */
  policyPath = '';
  decision: PolicyDecision | null = null;
  /** The agent's compiled policy (null: none set), for the limit stage. */
  policy: CompiledPolicy | null = null;
  /** The caches' count of policy changes when the policy decided (caches.ts policyChanges): a held call decided before a change is not held under it. */
  policyEpoch = 0;
  /** The first matching `mode: shadow` rule, recorded and never deciding. */
  shadowRule: CompiledRule | null = null;
  /** Request headers an MCP-aware policy checks (null: absent). */
  contentEncoding: string | null = null;
  contentType: string | null = null;
  contentTypeRepeated = false;
  /** A method-override header (X-HTTP-Method-Override and its kin) named this one: the call is refused (parse-target.ts). */
  methodOverride: string | null = null;
  mcpMethodHeader: string | null = null;
  mcpNameHeader: string | null = null;
  /** An MCP-aware policy read the body: its JSON-RPC requests (null elements are not requests), for the limits. */
  mcpCalls: readonly (McpCall | null)[] | null = null;
  /** The request the audit names (a batch: its first denied element, else its first); null when the body was not inspected or is not JSON-RPC. */
  mcpCall: McpCall | null = null;
  /** Fields the answer carries besides its own, [name, value, ...]: the RateLimit fields of a limited call, the approval of an approved one. */
  answerHeaders: string[] | null = null;

  addAnswerHeader(name: string, value: string): void {
    (this.answerHeaders ??= []).push(name, value);
  }
  address = '';
  /** Every address the guard checked for the target, `address` first. */
  addresses: readonly string[] = [];
  credential: InjectedCredential | null = null;

  // Held calls (hold.ts).
  /** X-Approval-Id of the request (null: absent): the retry of a held call. */
  approvalId: string | null = null;
  /** The approval this call is held under or retried with; its id is audited. */
  approval: Approval | null = null;
  /** Approved: the approval is claimed (approved → used) just before the forward (hold.ts, claim). */
  approved = false;
  /** The claim won: the approval is used, and given back if the call never goes upstream (hold.ts, returnUnsent). */
  claimed = false;
  /** undici began writing the request upstream (StreamResponse.onConnect): the call went to the tool. */
  upstreamWritten = false;
  /** An approved retry's rate-limit counts (RateLimiter.lastCharge), taken back if its claim fails. */
  rateCharge: number[] | null = null;
  /** The call waits for a decision: ends the wait (a client gone, or shutdown: then answered 202). */
  holdRelease: ((answer: boolean) => void) | null = null;
  /** Answered 202 (still pending): the contract writes no audit entry for it. */
  unaudited = false;

  // The exchange's outcome.
  aborted = false;
  finished = false;
  statusCode = 0;
  auditDecision: AuditDecision = 'allowed';
  ruleMatched = '';
  responseBytes = 0;
  /**
   * log_outputs: hash. A body that arrives whole in one chunk is hashed in one
   * call (crypto.hash, no Hash object: 0.3 vs 0.8 µs measured;
   * bench/micro/output-hash.ts, its 211-byte cases); anything else feeds an
   * incremental Hash.
   */
  hashing = false;
  outputHash: Hash | null = null;
  outputDigest: string | null = null;

  /** Feeds one response chunk to the output hash; `whole` when it is the entire body. */
  hashChunk(chunk: Buffer, whole: boolean): void {
    if (whole && this.outputHash === null) this.outputDigest = oneShotHash('sha256', chunk, 'hex');
    else (this.outputHash ??= createHash('sha256')).update(chunk);
  }

  #outputDigest(): string | null {
    if (!this.hashing) return null;
    if (this.outputDigest !== null) return this.outputDigest;
    return this.outputHash !== null ? this.outputHash.digest('hex') : EMPTY_SHA256;
  }
  capture: Buffer | null = null;
  captureLength = 0;
  captureTruncated = false;
  /** The body ended before its end (the client left, the upstream failed after its head, shutdown cut it): its last bytes may be a credential's first ones. */
  bodyCut = false;
  /**
   * The response came with a Content-Encoding other than identity: its bytes
   * could hold the credential where redaction cannot see it (gzip of an echo),
   * so a capture of them is not stored. log_outputs full asks the upstream for
   * identity (forward.ts), which nearly every server honours.
   */
  responseEncoded = false;
  /** performance.now() when the call went upstream, and the time to its response head. */
  forwardedAt = 0;
  upstreamMs = -1;
  /** Aborts the upstream request, once one is under way. */
  abortUpstream: ((reason?: Error) => void) | null = null;

  constructor(res: HttpResponse) {
    this.res = res;
  }

  /**
   * Reads `/proxy/{key}/{target}`: the key's hash (for the agent lookup) and the
   * raw target. False when the key is not of the API key's shape: such a call is
   * refused before any lookup, and not audited (no agent).
   */
  readProxyPath(url: string): boolean {
    const keyEnd = url.indexOf('/', PROXY_PREFIX_LENGTH);
    const key = keyEnd < 0 ? url.slice(PROXY_PREFIX_LENGTH) : url.slice(PROXY_PREFIX_LENGTH, keyEnd);
    this.rawTarget = keyEnd < 0 ? '' : url.slice(keyEnd + 1);
    if (!isApiKey(key)) return false;
    this.proxyKeyEnd = keyEnd;
    this.url = url;
    this.keyHash = hashApiKey(key);
    this.keyPrefix = key.slice(0, 12);
    return true;
  }

  /** A header of the request head (RequestHeadTarget): forwarded unless hop-by-hop or an agent annotation. */
  header(name: string, value: string): void {
    if (!REQUEST_DROP.has(name)) {
      if (name === 'x-request-id') {
        this.hasRequestId = true;
        if (value.length <= MAX_REQUEST_ID_CHARS) this.requestId = value;
      } else if (name === 'accept') {
        if (value.includes('text/event-stream')) this.acceptsEventStream = true;
      } else if (name === 'mcp-session-id') {
        if (value.length <= MAX_MCP_SESSION_ID_CHARS) this.mcpSessionId = value;
      } else if (name === 'content-encoding') {
        // Repeated, its lines joined: `br` then `identity` is not identity (a server may read the first).
        this.contentEncoding = this.contentEncoding === null ? value : `${this.contentEncoding}, ${value}`;
      } else if (name === 'content-type') {
        // Repeated: servers differ on which line counts (a flag, not a join: nothing grows per line).
        if (this.contentType === null) this.contentType = value;
        else this.contentTypeRepeated = true;
      } else if (name === 'mcp-method') {
        // Repeated, the field is its lines joined (RFC 9110 §5.3), which then matches no body: checked whole, not the last copy.
        this.mcpMethodHeader = this.mcpMethodHeader === null ? value : `${this.mcpMethodHeader}, ${value}`;
      } else if (name === 'mcp-name') {
        this.mcpNameHeader = this.mcpNameHeader === null ? value : `${this.mcpNameHeader}, ${value}`;
      } else if (name === 'x-http-method-override' || name === 'x-http-method' || name === 'x-method-override') {
        this.methodOverride = name;
      }
      // uWS hands the value decoded from UTF-8, and undici writes a string's
      // header as Latin-1: `ï` went out as one byte, `日` was a 400. Its UTF-8
      // bytes as Latin-1 characters go out as the agent sent them. Bytes that
      // were no UTF-8 (obs-text: uWS made them U+FFFD) stay refused (400).
      this.headers.push(name, NON_ASCII.test(value) && !value.includes('\uFFFD') ? Buffer.from(value, 'utf8').toString('latin1') : value);
    } else if (name === 'x-agent-reasoning') {
      this.reasoning = value.length > MAX_REASONING_CHARS ? value.slice(0, MAX_REASONING_CHARS) : value;
    } else if (name === 'x-agent-task-id') {
      this.taskId = value.length > MAX_TASK_ID_CHARS ? value.slice(0, MAX_TASK_ID_CHARS) : value;
    } else if (name === APPROVAL_ID_HEADER) {
      // An empty one names nothing: the call is treated as one without it.
      if (value.trim() !== '') this.approvalId = value;
    }
  }

  /** Sets a forwarded header (a lower-cased name), removing any the agent sent under that name first, so it can neither override nor duplicate it. */
  replaceHeader(name: string, value: string): void {
    const headers = this.headers;
    for (let i = headers.length - 2; i >= 0; i -= 2) {
      if (headers[i] === name) headers.splice(i, 2);
    }
    headers.push(name, value);
  }

  /** Fields the Connection header names are hop-by-hop too (RFC 9110 §7.6.1). */
  dropConnectionFields(names: readonly string[]): void {
    const kept: string[] = [];
    for (let i = 0; i < this.headers.length; i += 2) {
      if (!names.includes(this.headers[i]!)) kept.push(this.headers[i]!, this.headers[i + 1]!);
    }
    this.headers = kept;
  }

  /** uWS's onAborted: the client went away; nothing may touch `res` from now on. */
  clientAborted(): void {
    this.aborted = true;
    this.bodyCut = true;
    if (this.holdRelease !== null) {
      // Held: nothing was forwarded and nobody approved it, so it is no allowed call.
      this.auditDecision = 'denied';
      this.holdRelease(false);
    }
    this.body?.abort();
    this.abortUpstream?.(new Error('client aborted'));
    this.finish();
  }

  /**
   * Answers with the contract's error body (corked: this may run after an await)
   * and marks the call denied when the proxy itself refused it. `closeConnection`
   * ends the connection after the answer (a head whose framing cannot be trusted).
   */
  answerError(code: ErrorCode, message?: string, extra?: Record<string, unknown>, decision: AuditDecision = 'denied', closeConnection = false): false {
    if (this.finished || this.#lastSend !== null) return false;
    this.auditDecision = decision;
    if (!this.aborted) this.body?.detach();
    const status = ERRORS[code].status;
    this.statusCode = status;
    const body = this.aborted ? '' : errorBody(code, message, extra);
    const headOnly = this.method === 'HEAD';
    if (!this.aborted && answerCarriesBody(headOnly, closeConnection)) this.responseBytes = Buffer.byteLength(body);
    this.finish();
    if (!this.aborted) this.sendLast(() => this.res.cork(() => {
      this.res.writeStatus(statusLine(status)).writeHeader('content-type', 'application/json');
      if (status === 405) this.res.writeHeader('allow', PROXY_ALLOW);
      const extraHeaders = this.answerHeaders;
      if (extraHeaders !== null) for (let i = 0; i < extraHeaders.length; i += 2) this.res.writeHeader(extraHeaders[i]!, extraHeaders[i + 1]!);
      endAnswer(this.res, body, headOnly, closeConnection);
    }));
    return false;
  }

  /**
   * The held call is still pending: 202 with its id, Retry-After and Location,
   * and no audit entry (the retry's answer will have one).
   */
  answerPending(approval: Approval, retryAfterS: number, location: string): false {
    if (this.finished || this.#lastSend !== null) return false;
    this.unaudited = true;
    this.statusCode = 202;
    if (!this.aborted) {
      this.body?.detach();
      const body = JSON.stringify({ approval_id: approval.id, status: 'pending', expires_at: approval.expiresAt });
      const headOnly = this.method === 'HEAD';
      if (answerCarriesBody(headOnly, false)) this.responseBytes = Buffer.byteLength(body);
      this.res.cork(() => {
        this.res.writeStatus(statusLine(202)).writeHeader('content-type', 'application/json');
        this.res.writeHeader('retry-after', String(retryAfterS)).writeHeader('location', location);
        endAnswer(this.res, body, headOnly);
      });
    }
    this.finish();
    return false;
  }

  /** Ends the exchange once: queues the audit record, unless sendLast already did. Safe to call twice. */
  finish(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.aborted) this.statusCode = 499;
    this.#record();
    // Still waiting for its agent: it leaves the calls in flight when the read
    // answers and its record is queued (agentLookupSettled), so shutdown's drain
    // does not close the audit before that record (a store's read takes a round trip).
    if (!this.lookingUpAgent) this.onDone?.(this);
  }

  /** Set by resolve-agent while the agent is read from the store. */
  lookingUpAgent = false;

  /** The agent's read from the store answered (or failed): a call that ended meanwhile is done now. */
  agentLookupSettled(): void {
    this.lookingUpAgent = false;
    if (this.finished) this.onDone?.(this);
  }

  /**
   * The call ended (its client left, shutdown answered it) while its agent was
   * still being looked up: finish() had no agent to record it under. Now that
   * the agent is known, its record is queued.
   */
  recordLate(): void {
    if (!this.finished || this.#recordQueued || this.agent === null) return;
    this.recordingLate = true; // its metrics were counted at finish()
    this.#recordQueued = this.onFinish?.(this) ?? false;
  }

  /** Set while recordLate queues the record: the record stage counts no metrics again. */
  recordingLate = false;

  /** The audit record is queued (by finish or sendLast), and whether there was one to queue (a known agent, not a pending hold). */
  #recorded = false;
  #recordQueued = false;

  #record(): void {
    if (this.#recorded) return;
    this.#recorded = true;
    this.#recordQueued = this.onFinish?.(this) ?? false;
  }

  /** The answer's last send, held until the call's record is in the journal. */
  #lastSend: (() => void) | null = null;

  /**
   * Sends the answer's last bytes (`send` corks its writes) once the call's audit
   * record is in the journal: the record is queued first, and the send waits for
   * the turn's journal write (audit-journal.ts), so a client never holds an
   * answer whose record a SIGKILL could lose. A client gone by then gets nothing
   * (its record, queued already, keeps the answer it was about to get).
   */
  sendLast(send: () => void): void {
    this.#record();
    if (!this.#recordQueued || this.waitForJournal === null) {
      send();
      return;
    }
    this.#lastSend = send;
    this.waitForJournal(this);
  }

  /** The call's record is in the journal: its held last send goes (JournalWaiter). */
  journaled(): void {
    const send = this.#lastSend;
    if (send === null || this.aborted) return;
    this.#lastSend = null;
    send();
  }

  /**
   * The audit pipeline closed before this call's record could be kept (the call
   * ended after shutdown's flush): no answer goes, the connection is closed, as
   * for a request that arrives then (lifecycle.ts, stopAnswering).
   */
  refused(): void {
    const send = this.#lastSend;
    this.#lastSend = null;
    if (send !== null && !this.aborted) this.res.close();
  }

  /** A last send is waiting for the journal: nothing else may answer. */
  get lastSendHeld(): boolean {
    return this.#lastSend !== null;
  }

  /** The request's path, and where its `/proxy/{key}` part ends (for proxyPrefix). */
  url = '';
  proxyKeyEnd = -1;

  /** `/proxy/{key}/{host[:port]}` as the agent wrote it: what an absolute upstream path is resolved under. */
  proxyPrefix(): string {
    const target = this.rawTarget;
    let end = target.indexOf('/');
    if (end < 0) end = target.length;
    return `${this.url.slice(0, this.proxyKeyEnd)}/${target.slice(0, end)}`;
  }

  /** Mcp-Session-Id of the request, else of the response (stream-response.ts); recorded in the audit. */
  mcpSessionId: string | null = null;

  /** The agent accepts an event stream (Accept: text/event-stream): the upstream body gets the stream idle timeout. */
  acceptsEventStream = false;

  /** Set by the proxy: turns the exchange into an audit record (at finish, or before the last send); true when one was queued. */
  onFinish: ((ex: ProxyExchange) => boolean) | null = null;

  /** Set by the proxy: the exchange is over (its answer sent or cut, or its client gone): no longer in flight. */
  onDone: ((ex: ProxyExchange) => void) | null = null;

  /** Set by the proxy: calls `ex.journaled()` once the records queued so far are in the journal (the batcher's afterJournaled). */
  waitForJournal: ((ex: ProxyExchange) => void) | null = null;

  /** The upstream response once its head arrived (stream-response.ts); shutdown and an agent's deletion end it through it. */
  upstream: { endEarly(why: EndReason): void } | null = null;

  /**
   * Shutdown's drain deadline has passed: a streaming response ends as a
   * complete response (clients reconnect); a call still waiting for its
   * upstream is answered 503. Either way it is audited with what happened.
   */
  endForShutdown(): void {
    if (this.finished || this.aborted) return;
    if (this.holdRelease !== null) {
      this.holdRelease(true);
      return;
    }
    this.#endNow('shutdown');
  }

  /**
   * The agent was deleted: its call ends now, as at shutdown (a streaming
   * response complete when its framing allows, else cut), but a call not yet
   * answered gets 401 invalid_api_key, and its upstream request is aborted, a
   * body still arriving unfinished. A held call is hold.ts's to answer.
   */
  endForAgentDeleted(): void {
    if (this.finished || this.aborted || this.holdRelease !== null) return;
    this.#endNow('agent_deleted');
  }

  #endNow(why: EndReason): void {
    if (this.upstream !== null) {
      this.upstream.endEarly(why);
      return;
    }
    // Shutdown: allowed by the policy, unless it needs an approval it does not
    // have (hold.ts). Deleted: allowed once it is being sent upstream (undici's
    // onConnect gave its abort); else refused here.
    answerEnded(this, why, why === 'shutdown' || this.abortUpstream !== null ? this.auditDecision : 'denied');
    this.abortUpstream?.(new Error(END_REASONS[why]));
  }

  /** The target URL as the agent sent it (no injected query credential). */
  toolUrl(): string {
    return `https://${this.rawTarget}${this.query.length > 0 ? `?${this.query}` : ''}`;
  }

  /**
   * The policy gave the call its final decision: allowed by it (whatever the
   * upstream did), or refused by it. Not when a later stage refused a call it
   * allowed (SSRF guard, a limit, a header the upstream client refused). Policy
   * replay re-evaluates only these.
   */
  #policyDecided(): boolean {
    const decision = this.decision;
    if (decision === null) return false;
    return this.auditDecision === 'allowed' ? decision.decision === 'allow' : decision.decision === 'deny' && this.ruleMatched === decision.ruleMatched;
  }

  toAuditRecord(): AuditRecord {
    const agent = this.agent!;
    let output: string | null = null;
    // An encoded body is not stored; an empty one has nothing to hide: "", as for any empty body.
    if (this.capture !== null && (!this.responseEncoded || this.responseBytes === 0)) {
      let captured = this.capture.subarray(0, this.captureLength);
      if (this.credential !== null) captured = redactCapture(captured, this.credential.spellings, this.captureTruncated || this.bodyCut);
      output = captureToText(captured, this.captureTruncated);
    }
    return {
      id: this.id,
      timestamp: isoOfMs(this.timestamp),
      timestampMs: this.timestamp,
      orgId: agent.orgId,
      agentId: agent.id,
      agentName: agent.name,
      toolName: this.target?.hostname ?? '',
      action: this.method,
      toolUrl: this.toolUrl(),
      decision: this.auditDecision,
      reasoning: this.reasoning,
      taskId: this.taskId,
      latencyMs: Math.round(performance.now() - this.startedAt),
      statusCode: this.statusCode,
      ruleMatched: this.ruleMatched,
      source: 'proxy',
      requestBytes: this.body !== null ? this.body.received : 0,
      responseBytes: this.responseBytes,
      outputHash: this.#outputDigest(),
      output,
      outputTruncated: output !== null && this.captureTruncated,
      requestId: this.requestId || this.id,
      mcpSessionId: this.mcpSessionId,
      mcpMethod: this.mcpCall?.method ?? null,
      mcpTool: this.mcpCall?.tool ?? null,
      shadowRule: this.shadowRule?.name ?? null,
      shadowDecision: this.shadowRule?.result.decision ?? null,
      policyPath: this.decision !== null ? this.policyPath : '',
      policyDecided: this.#policyDecided(),
      approvalId: this.approval?.id ?? null,
    };
  }
}

const REDACTED = Buffer.from('[REDACTED]');

/**
 * The captured body without the injected credential: an upstream that echoes its
 * request (headers, URL) would otherwise put the value into the audit log, which
 * must never hold one (CONTRACT.md "Credentials"). Every spelling is replaced;
 * when the cap cut the body, a tail that begins a spelling is dropped too, so no
 * prefix of the secret is kept either.
 */
export function redactCapture(bytes: Buffer, spellings: readonly Buffer[], truncated: boolean): Buffer {
  let out = bytes;
  for (const spelling of spellings) {
    let at = out.indexOf(spelling);
    if (at < 0) continue;
    const parts: Buffer[] = [];
    let from = 0;
    while (at >= 0) {
      parts.push(out.subarray(from, at), REDACTED);
      from = at + spelling.length;
      at = out.indexOf(spelling, from);
    }
    parts.push(out.subarray(from));
    out = Buffer.concat(parts);
  }
  if (truncated) {
    for (const spelling of spellings) {
      // The earliest start in the last (length - 1) bytes whose rest is a prefix of the spelling.
      for (let i = Math.max(0, out.length - spelling.length + 1); i < out.length; i++) {
        if (out[i] === spelling[0] && out.compare(spelling, 0, out.length - i, i) === 0) {
          out = out.subarray(0, i);
          break;
        }
      }
    }
  }
  return out;
}

/** UTF-8 text when the captured bytes are text (a character cut by the cap is dropped), else base64. */
function captureToText(bytes: Buffer, truncated: boolean): string {
  let end = bytes.length;
  if (truncated) {
    // Step back over a UTF-8 sequence the cap cut in half.
    let i = end - 1;
    while (i >= 0 && i > end - 4 && (bytes[i]! & 0xc0) === 0x80) i--;
    if (i >= 0) {
      const lead = bytes[i]!;
      const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
      if (end - i < need) end = i;
    }
  }
  const text = bytes.subarray(0, end);
  return isUtf8Text(text) ? text.toString('utf8') : bytes.toString('base64');
}

function isUtf8Text(bytes: Buffer): boolean {
  return isUtf8(bytes) && !bytes.includes(0);
}

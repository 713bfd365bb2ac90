// A test stand-in for a ClickHouse server: enough of ClickHouse's HTTP interface
// for @clickhouse/client, executing every query on the embedded chDB engine.
//
// No ClickHouse server runs on the test machines, so split-mode tests (audit
// store over CLICKHOUSE_URL) talk to this instead. What it implements:
//
// - GET/HEAD `/ping`, `/` (without a query) and `/replicas_status` → `Ok.\n`.
// - `POST /` and `GET /?query=`: the query is the URL's `query` parameter, a
//   newline, then the body (ClickHouse's rule), or the body alone; `database`
//   (or `X-ClickHouse-Database`), `default_format` (or `X-ClickHouse-Format`),
//   `query_id`, `param_<name>` (bound by the engine, never spliced into the SQL),
//   and every other URL parameter as a setting for that one query. Settings
//   that only steer the HTTP layer (`enable_http_compression`, `http_*`,
//   `wait_end_of_query`, ...) are honoured or dropped here, never sent to the
//   engine. `multipart/form-data` bodies carrying `query` and `param_*` parts.
// - INSERT with inline data (`INSERT INTO t FORMAT JSONEachRow` in the URL, the
//   rows in the body) runs as one statement; an empty body inserts nothing. The
//   data reaches the engine as a file (INSERT … FROM INFILE) when the statement's
//   shape allows it: chDB parses data inline after a statement ~4× slower than
//   its file reader (docs/performance.md), and a server parses the body as it
//   comes, so inline would make this stand-in far costlier than the server it
//   stands for (the bench runs the split proxy beside it on the same cores).
//   FROM INFILE also inserts what waits on the process's standard input: the
//   launchers here start it with stdin ignored.
// - Output in whatever format the query's FORMAT clause, `default_format`, or
//   TabSeparated names; chDB writes it, so any format chDB knows works.
// - Errors: the status ClickHouse maps the error code to (400 syntax/parse, 404
//   unknown table/setting/..., 500 otherwise), body
//   `Code: N. DB::Exception: ... (NAME) (version V)\n`, header
//   `X-ClickHouse-Exception-Code`. Multi-statement queries are refused (62) and
//   GET runs read-only queries only (164), as on a real server.
// - Auth, when a user or password is configured: basic auth,
//   `X-ClickHouse-User`/`X-ClickHouse-Key` or `user`/`password` URL parameters;
//   a mismatch answers 403 with code 516 (AUTHENTICATION_FAILED), as ClickHouse does.
// - Request bodies with `Content-Encoding` gzip, deflate or br (zstd where Node has
//   it); responses compressed when the query has `enable_http_compression=1` and
//   the client accepts gzip, deflate or br.
// - Response headers `X-ClickHouse-Query-Id`, `X-ClickHouse-Format`,
//   `X-ClickHouse-Timezone`, `X-ClickHouse-Server-Display-Name`,
//   `X-ClickHouse-Summary`.
//
// Not implemented (a real server differs): sessions (`session_id` is ignored; all
// requests share one engine session, so a client's own `SET`/`USE` statement or
// temporary table outlives its request); progress headers; mid-stream
// exceptions (results are buffered whole, as with wait_end_of_query=1); native
// block compression (`compress=1`/`decompress=1` → NOT_IMPLEMENTED); external
// tables in multipart bodies; JWT auth, roles, quotas; `readonly=2` is treated
// as `readonly=1`. Bodies are capped at 256 MiB.
//
// One chDB session runs everything, one request at a time (a queue): chDB keeps
// settings and the current database per session, so each request first puts the
// session in its state (`USE`, `SET x = v` for its settings, `SET x = DEFAULT`
// for the previous request's), which makes per-query settings behave as on a
// server. A process can have one chDB data directory open; chDB (~200 MB) is
// imported only when a server starts, so importing this module is cheap.
//
// `spawnClickHouseHttpServer` runs the server in a child process
// (clickhouse-http-server-main.ts), which is how a test simulates an outage: kill
// it, start it again on the same port and data directory.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID, timingSafeEqual } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { hostname } from 'node:os';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import zlib from 'node:zlib';

export interface ClickHouseHttpServerOptions {
  /** chDB's data directory (created when missing). One per process. */
  dataDir: string;
  /** 0 or absent: a free port. */
  port?: number;
  /** When a user or a password is set, every query must authenticate as that
   *  user (default `default`) with that password (default empty). */
  user?: string;
  password?: string;
}

export interface ClickHouseHttpServer {
  /** `http://127.0.0.1:<port>` */
  url: string;
  port: number;
  /** Stops listening, drops connections, waits for the running query, closes chDB. */
  stop(): Promise<void>;
  /** Simulated outage: drops every open connection and answers each new request
   *  503 (code 210, NETWORK_ERROR) with `Connection: close` until resume(). */
  pause(): void;
  resume(): void;
}

const MAX_BODY_BYTES = 256 * 1024 * 1024;

/** URL parameters that are part of the HTTP interface, not settings. */
const INTERFACE_PARAMS = new Set([
  'query', 'database', 'default_format', 'user', 'password', 'quota_key', 'query_id', 'session_id',
  'session_timeout', 'session_check', 'compress', 'decompress', 'buffer_size', 'wait_end_of_query',
  'role', 'stacktrace', 'client_protocol_version', 'readonly',
]);

/** Settings of the HTTP layer only; the engine does not know some of them
 *  (chDB answers UNKNOWN_SETTING for `wait_end_of_query`). */
const HTTP_ONLY_SETTINGS = new Set([
  'enable_http_compression', 'send_progress_in_http_headers', 'add_http_cors_header',
  'cancel_http_readonly_queries_on_client_close', 'max_http_get_redirects',
]);

/** Read-only query kinds (what a GET, or `readonly=1`, may run). */
const READ_ONLY_KINDS = new Set(['SELECT', 'WITH', 'SHOW', 'DESCRIBE', 'DESC', 'EXISTS', 'EXPLAIN', '(']);

/** ClickHouse's exceptionCodeToHTTPStatus, keyed by the error's name. */
const STATUS_BY_ERROR: Readonly<Record<string, number>> = {
  REQUIRED_PASSWORD: 401,
  UNKNOWN_USER: 403, WRONG_PASSWORD: 403, AUTHENTICATION_FAILED: 403, SET_NON_GRANTED_ROLE: 403,
  BAD_ARGUMENTS: 400, CANNOT_COMPILE_REGEXP: 400, CANNOT_PARSE_TEXT: 400, CANNOT_PARSE_ESCAPE_SEQUENCE: 400,
  CANNOT_PARSE_QUOTED_STRING: 400, CANNOT_PARSE_DATE: 400, CANNOT_PARSE_DATETIME: 400, CANNOT_PARSE_NUMBER: 400,
  CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING: 400, CANNOT_PARSE_IPV4: 400, CANNOT_PARSE_IPV6: 400,
  CANNOT_PARSE_INPUT_ASSERTION_FAILED: 400, CANNOT_PARSE_UUID: 400, DUPLICATE_COLUMN: 400, ILLEGAL_COLUMN: 400,
  UNKNOWN_ELEMENT_IN_AST: 400, UNKNOWN_TYPE_OF_AST_NODE: 400, THERE_IS_NO_COLUMN: 400, TOO_DEEP_AST: 400,
  TOO_BIG_AST: 400, UNEXPECTED_AST_STRUCTURE: 400, SYNTAX_ERROR: 400, INCORRECT_DATA: 400, TYPE_MISMATCH: 400,
  VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE: 400,
  UNKNOWN_TABLE: 404, UNKNOWN_FUNCTION: 404, UNKNOWN_IDENTIFIER: 404, UNKNOWN_TYPE: 404, UNKNOWN_STORAGE: 404,
  UNKNOWN_DATABASE: 404, UNKNOWN_SETTING: 404, UNKNOWN_DIRECTION_OF_SORTING: 404, UNKNOWN_AGGREGATE_FUNCTION: 404,
  UNKNOWN_FORMAT: 404, UNKNOWN_DATABASE_ENGINE: 404, UNKNOWN_TYPE_OF_QUERY: 404, UNKNOWN_ROLE: 404,
  QUERY_IS_TOO_LARGE: 413, NOT_IMPLEMENTED: 501, SOCKET_TIMEOUT: 503, CANNOT_OPEN_FILE: 503,
  HTTP_LENGTH_REQUIRED: 411, TIMEOUT_EXCEEDED: 408, CANNOT_SCHEDULE_TASK: 503,
};

/** An error answered in ClickHouse's shape. */
class ServerError extends Error {
  constructor(readonly code: number, readonly type: string, message: string) {
    super(message);
  }
}

const err = {
  syntax: (m: string) => new ServerError(62, 'SYNTAX_ERROR', m),
  notImplemented: (m: string) => new ServerError(48, 'NOT_IMPLEMENTED', m),
  badArguments: (m: string) => new ServerError(36, 'BAD_ARGUMENTS', m),
  readonly: (m: string) => new ServerError(164, 'READONLY', m),
  auth: (user: string) => new ServerError(516, 'AUTHENTICATION_FAILED',
    `${user}: Authentication failed: password is incorrect, or there is no user with such name`),
  tooLarge: (m: string) => new ServerError(166, 'QUERY_IS_TOO_LARGE', m),
};

// The parts of chDB's API this server uses (chdb's own index.d.ts types them too;
// named here so the dynamic import stays lazy).
interface ChdbResult { readonly elapsed: number; readonly rowsRead: number; readonly bytesRead: number; bytes(): Uint8Array }
interface ChdbSession {
  queryAsync(query: string, opts?: { format?: string }): Promise<ChdbResult>;
  queryBindAsync(query: string, params: object, opts?: { format?: string }): Promise<ChdbResult>;
  close(): void;
}

export async function startClickHouseHttpServer(opts: ClickHouseHttpServerOptions): Promise<ClickHouseHttpServer> {
  mkdirSync(opts.dataDir, { recursive: true });
  const { Session } = await import('chdb');
  const session: ChdbSession = new Session(opts.dataDir);
  const insertDir = join(opts.dataDir, 'http-inserts');
  mkdirSync(insertDir, { recursive: true });
  const engine = new Engine(session, insertDir);
  let info: { version: string; timezone: string };
  try {
    info = await engine.serverInfo();
  } catch (e) {
    session.close();
    throw e;
  }
  const auth = opts.user !== undefined || opts.password !== undefined
    ? { user: opts.user ?? 'default', password: opts.password ?? '' }
    : null;
  const displayName = hostname();
  const sockets = new Set<Socket>();
  let paused = false;

  // ClickHouse reads a URI of up to 1 MiB (http_max_uri_size): query parameters travel in it (the
  // live stream's 1,000 ids are ~40 KB), where Node's default would refuse a head over 16 KiB.
  const server = createServer({ keepAliveTimeout: 10_000, maxHeaderSize: 1024 * 1024 }, (req, res) => {
    handle(req, res).catch((e: unknown) => {
      // Only a failure to write the answer lands here.
      if (!res.headersSent) sendError(res, toServerError(e), info.version);
      else res.destroy();
    });
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    res.setHeader('X-ClickHouse-Server-Display-Name', displayName);
    if (paused) {
      req.resume();
      res.setHeader('Connection', 'close');
      sendError(res, new ServerError(210, 'NETWORK_ERROR', 'The server is paused (simulated outage)'), info.version, 503);
      return;
    }
    const method = req.method ?? 'GET';
    const path = url.pathname;
    if ((path === '/ping' || path === '/replicas_status' || (path === '/' && !url.searchParams.has('query'))) &&
        (method === 'GET' || method === 'HEAD')) {
      req.resume();
      res.writeHead(200, { 'Content-Type': 'text/html; charset=UTF-8', 'Content-Length': '4' });
      res.end(method === 'HEAD' ? undefined : 'Ok.\n');
      return;
    }
    if (path !== '/') {
      req.resume();
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=UTF-8' });
      res.end(`There is no handle ${path}\n\nUse / or /ping for health checks.\nSend queries with POST / or GET /?query=...\n`);
      return;
    }
    if (method !== 'GET' && method !== 'POST') {
      req.resume();
      res.writeHead(405, { 'Content-Type': 'text/plain; charset=UTF-8', Allow: 'GET, HEAD, POST' });
      res.end(`Method ${method} is not allowed; send queries with POST / or GET /?query=...\n`);
      return;
    }
    const queryId = url.searchParams.get('query_id') || randomUUID();
    res.setHeader('X-ClickHouse-Query-Id', queryId);
    res.setHeader('X-ClickHouse-Timezone', info.timezone);
    try {
      if (auth !== null) checkAuth(req, url, auth);
      const body = await readBody(req);
      const request = parseRequest(req, url, body, method === 'GET');
      const started = process.hrtime.bigint();
      const outcome = await engine.run(request);
      const elapsedNs = process.hrtime.bigint() - started;
      let payload: Buffer = Buffer.from(outcome.output.buffer, outcome.output.byteOffset, outcome.output.byteLength);
      const headers: Record<string, string> = {
        'Content-Type': contentType(request.format),
        'X-ClickHouse-Format': request.format,
        'X-ClickHouse-Summary': JSON.stringify({
          read_rows: String(outcome.readRows),
          read_bytes: String(outcome.readBytes),
          written_rows: String(outcome.writtenRows),
          written_bytes: String(outcome.writtenBytes),
          total_rows_to_read: String(outcome.readRows),
          result_rows: String(outcome.resultRows),
          result_bytes: String(payload.length),
          elapsed_ns: elapsedNs.toString(),
        }),
      };
      const encoding = request.compressResponse ? pickEncoding(req.headers['accept-encoding']) : null;
      if (encoding !== null && payload.length > 0) {
        payload = await COMPRESS[encoding](payload);
        headers['Content-Encoding'] = encoding;
      }
      headers['Content-Length'] = String(payload.length);
      res.writeHead(200, headers);
      res.end(payload);
    } catch (e) {
      // An unread body would otherwise be parsed as the next request on this socket.
      if (!req.complete) res.setHeader('Connection', 'close');
      req.resume();
      sendError(res, toServerError(e), info.version);
    }
  }

  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port ?? 0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (e) {
    session.close();
    throw e;
  }
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the server has no TCP address');
  const port = address.port;

  let stopping: Promise<void> | null = null;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    stop() {
      stopping ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const s of sockets) s.destroy();
        await closed;
        await engine.close();
      })();
      return stopping;
    },
    pause() {
      paused = true;
      for (const s of sockets) s.destroy();
    },
    resume() {
      paused = false;
    },
  };
}

// ---------------------------------------------------------------------------
// The engine: one chDB session, one request at a time.

interface QueryRequest {
  /** The whole statement, inline data included. */
  sql: string;
  database: string;
  /** Setting name → value as sent (text). */
  settings: Map<string, string>;
  /** Parameter name → value for chDB's binder (decoded per placeholder type). */
  params: Record<string, unknown> | null;
  /** The format the output is in (FORMAT clause, default_format, or TabSeparated). */
  format: string;
  /** default_format, handed to chDB for queries without a FORMAT clause. */
  defaultFormat: string;
  /** INSERT with inline data that is empty: nothing to run. */
  emptyInsert: boolean;
  /**
   * An INSERT whose data can go as a file: the statement up to its FORMAT
   * clause (no SETTINGS in it, no placeholders), the format, and the data.
   */
  fileInsert: { head: string; format: string; data: string } | null;
  /** Rows of inline INSERT data, counted for the summary (line formats only). */
  insertRows: number;
  insertBytes: number;
  compressResponse: boolean;
}

interface Outcome {
  output: Uint8Array;
  readRows: number;
  readBytes: number;
  writtenRows: number;
  writtenBytes: number;
  resultRows: number;
}

class Engine {
  readonly #session: ChdbSession;
  /** Settings this server has SET on the session, with their values. */
  #applied = new Map<string, string>();
  #tail: Promise<unknown> = Promise.resolve();
  #closed = false;

  /** Where INSERT data goes as a file for the engine to read (FROM INFILE). */
  readonly #insertDir: string;
  #insertFiles = 0;

  constructor(session: ChdbSession, insertDir: string) {
    this.#session = session;
    this.#insertDir = insertDir;
  }

  serverInfo(): Promise<{ version: string; timezone: string }> {
    return this.#enqueue(async () => {
      const text = Buffer.from((await this.#session.queryAsync('SELECT version(), timezone()', { format: 'TabSeparated' })).bytes()).toString('utf8');
      const [version = 'unknown', timezone = 'UTC'] = text.trim().split('\t');
      return { version, timezone };
    });
  }

  run(q: QueryRequest): Promise<Outcome> {
    return this.#enqueue(async () => {
      if (this.#closed) throw new ServerError(210, 'NETWORK_ERROR', 'The server is shutting down');
      await this.#use(q.database);
      await this.#applySettings(q.settings);
      if (q.emptyInsert) {
        return { output: new Uint8Array(0), readRows: 0, readBytes: 0, writtenRows: 0, writtenBytes: 0, resultRows: 0 };
      }
      const opts = { format: q.defaultFormat };
      let file: string | null = null;
      let sql = q.sql;
      if (q.fileInsert !== null && q.params === null) {
        file = join(this.#insertDir, `${++this.#insertFiles}.data`);
        await writeFile(file, q.fileInsert.data);
        // On a line of its own: a line comment in the head would swallow it.
        sql = `${q.fileInsert.head}\nFROM INFILE ${quoteString(file)} FORMAT ${q.fileInsert.format}`;
      }
      let result: ChdbResult;
      try {
        result = q.params !== null
          ? await this.#session.queryBindAsync(sql, q.params, opts)
          : await this.#session.queryAsync(sql, opts);
      } finally {
        if (file !== null) await rm(file, { force: true });
      }
      const output = result.bytes();
      const isInsert = q.insertBytes > 0;
      return {
        output,
        readRows: isInsert ? q.insertRows : result.rowsRead,
        readBytes: isInsert ? q.insertBytes : result.bytesRead,
        writtenRows: isInsert ? q.insertRows : 0,
        writtenBytes: isInsert ? q.insertBytes : 0,
        resultRows: isInsert ? 0 : result.rowsRead,
      };
    });
  }

  async close(): Promise<void> {
    await this.#enqueue(async () => {
      if (this.#closed) return;
      this.#closed = true;
      this.#session.close();
    });
  }

  #enqueue<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#tail.then(fn, fn);
    this.#tail = run.catch(() => undefined);
    return run;
  }

  async #use(database: string): Promise<void> {
    // Every time: a query may have run USE itself.
    await this.#session.queryAsync(`USE ${quoteIdentifier(database)}`, { format: 'TabSeparated' });
  }

  /** Puts exactly `wanted` (beyond the engine's defaults) on the session. */
  async #applySettings(wanted: Map<string, string>): Promise<void> {
    const changes: string[] = [];
    for (const [name, value] of wanted) {
      if (this.#applied.get(name) !== value) changes.push(`${name} = ${quoteString(value)}`);
    }
    for (const name of this.#applied.keys()) {
      if (!wanted.has(name)) changes.push(`${name} = DEFAULT`);
    }
    if (changes.length === 0) return;
    try {
      await this.#session.queryAsync(`SET ${changes.join(', ')}`, { format: 'TabSeparated' });
      this.#applied = new Map(wanted);
    } catch (e) {
      // Unknown which of them took: put each back to its default, one by one.
      for (const name of new Set([...this.#applied.keys(), ...wanted.keys()])) {
        await this.#session.queryAsync(`SET ${name} = DEFAULT`, { format: 'TabSeparated' }).catch(() => undefined);
      }
      this.#applied = new Map();
      throw e;
    }
  }
}

// ---------------------------------------------------------------------------
// Requests

function parseRequest(req: IncomingMessage, url: URL, body: Buffer, isGet: boolean): QueryRequest {
  const search = url.searchParams;
  let bodyText: string;
  const rawParams = new Map<string, string>();
  const contentType = req.headers['content-type'] ?? '';
  const multipart = /^multipart\/form-data\s*;.*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  if (multipart !== null) {
    bodyText = '';
    for (const [name, value] of parseMultipart(body, multipart[1] ?? multipart[2] ?? '')) {
      if (name === 'query') bodyText = value;
      else if (name.startsWith('param_')) rawParams.set(name.slice('param_'.length), value);
      else throw err.notImplemented(`multipart part ${JSON.stringify(name)}: external tables are not supported by this test server`);
    }
  } else {
    bodyText = body.toString('utf8');
  }
  for (const [key, value] of search) {
    if (key.startsWith('param_')) rawParams.set(key.slice('param_'.length), value);
  }
  for (const flag of ['compress', 'decompress']) {
    if ((search.get(flag) ?? '0') !== '0') {
      throw err.notImplemented(`${flag}=1 (ClickHouse's native block compression) is not supported by this test server; use Content-Encoding / enable_http_compression`);
    }
  }
  const urlQuery = search.get('query') ?? '';
  const sql = urlQuery !== '' ? (bodyText !== '' ? `${urlQuery}\n${bodyText}` : urlQuery) : bodyText;
  if (sql.trim() === '') throw err.syntax('Empty query');
  if (sql.length > MAX_BODY_BYTES) throw err.tooLarge('Query is too large');

  const scan = scanQuery(sql);
  if (scan.multiStatement) throw err.syntax('Syntax error (Multi-statements are not allowed): failed at the second statement');
  const readonly = isGet || (search.get('readonly') ?? '0') !== '0';
  if (readonly && !READ_ONLY_KINDS.has(scan.kind)) {
    throw err.readonly(isGet
      ? 'Cannot execute query in readonly mode. For queries over HTTP, method GET implies readonly. You should use method POST for modifying queries'
      : 'Cannot execute query in readonly mode');
  }

  const settings = new Map<string, string>();
  for (const [key, value] of search) {
    if (INTERFACE_PARAMS.has(key) || HTTP_ONLY_SETTINGS.has(key) || key.startsWith('param_') || key.startsWith('http_')) continue;
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new ServerError(115, 'UNKNOWN_SETTING', `Unknown setting '${key}'`);
    settings.set(key, value);
  }

  let params: Record<string, unknown> | null = null;
  if (rawParams.size > 0) {
    params = {};
    for (const [name, raw] of rawParams) params[name] = decodeParam(name, raw, scan.placeholders.get(name));
  }

  const defaultFormat = search.get('default_format') ?? headerValue(req, 'x-clickhouse-format') ?? 'TabSeparated';
  const data = scan.dataStart === null ? null : sql.slice(scan.dataStart);
  const lineFormat = /(EachRow|TabSeparated|TSV|CSV|Lines)$/i.test(scan.inputFormat ?? '');
  const dataLines = data === null || !lineFormat ? 0 : countNonBlankLines(data);
  // `INSERT INTO t [(cols)] FORMAT X` and the data: the file form puts FROM INFILE
  // before FORMAT. Any other shape (SETTINGS, VALUES, SELECT) runs inline.
  const head = data === null || data.trim() === '' ? null : /^([\s\S]*?)\s+FORMAT\s+([A-Za-z][A-Za-z0-9]*)\s*$/i.exec(sql.slice(0, scan.dataStart!));
  const fileInsert = head !== null && scan.kind === 'INSERT' && !/\b(SETTINGS|SELECT|WITH)\b|[{}'"`]/i.test(head[1]!)
    // What the engine skips before inline data (spaces, then one line break), a file keeps.
    ? { head: head[1]!, format: head[2]!, data: data!.replace(/^[ \t\f]*\r?\n?/, '') }
    : null;
  return {
    sql,
    database: search.get('database') ?? headerValue(req, 'x-clickhouse-database') ?? 'default',
    settings,
    params,
    format: scan.format ?? defaultFormat,
    defaultFormat,
    emptyInsert: data !== null && data.trim() === '',
    fileInsert,
    insertRows: dataLines,
    insertBytes: data === null ? 0 : Buffer.byteLength(data),
    compressResponse: search.get('enable_http_compression') === '1',
  };
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function checkAuth(req: IncomingMessage, url: URL, expected: { user: string; password: string }): void {
  let user = 'default';
  let password = '';
  const headerUser = headerValue(req, 'x-clickhouse-user');
  const authorization = headerValue(req, 'authorization');
  if (headerUser !== undefined) {
    user = headerUser;
    password = headerValue(req, 'x-clickhouse-key') ?? '';
  } else if (authorization !== undefined) {
    const basic = /^Basic\s+(\S+)$/i.exec(authorization);
    if (basic === null) throw err.auth(user);
    const decoded = Buffer.from(basic[1] ?? '', 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    user = colon < 0 ? decoded : decoded.slice(0, colon);
    password = colon < 0 ? '' : decoded.slice(colon + 1);
  } else if (url.searchParams.has('user')) {
    user = url.searchParams.get('user') ?? 'default';
    password = url.searchParams.get('password') ?? '';
  }
  if (!(sameText(user, expected.user) && sameText(password, expected.password))) throw err.auth(user);
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

const DECOMPRESS: Record<string, (b: Buffer) => Promise<Buffer>> = {
  gzip: promisify(zlib.gunzip),
  'x-gzip': promisify(zlib.gunzip),
  deflate: promisify(zlib.inflate),
  br: promisify(zlib.brotliDecompress),
};
const COMPRESS: Record<'gzip' | 'deflate' | 'br', (b: Buffer) => Promise<Buffer>> = {
  gzip: promisify(zlib.gzip),
  deflate: promisify(zlib.deflate),
  br: promisify(zlib.brotliCompress),
};
{
  // zstd arrived in Node 22.15; use it where the runtime has it.
  const z = zlib as unknown as { zstdDecompress?: (b: Buffer, cb: (e: Error | null, r: Buffer) => void) => void };
  if (typeof z.zstdDecompress === 'function') DECOMPRESS.zstd = promisify(z.zstdDecompress.bind(zlib));
}

function pickEncoding(accept: string | undefined): 'gzip' | 'deflate' | 'br' | null {
  for (const part of (accept ?? '').split(',')) {
    const name = part.split(';')[0]?.trim().toLowerCase();
    if (name === 'gzip' || name === 'deflate' || name === 'br') return name;
  }
  return null;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw err.tooLarge(`The request body is larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  let body: Buffer = Buffer.concat(chunks);
  const encoding = (headerValue(req, 'content-encoding') ?? '').trim().toLowerCase();
  if (encoding !== '' && encoding !== 'identity') {
    const decode = DECOMPRESS[encoding];
    if (decode === undefined) throw err.notImplemented(`Unknown HTTP compression method: ${encoding}`);
    try {
      body = await decode(body);
    } catch (e) {
      throw new ServerError(354, 'CANNOT_DECOMPRESS', `Cannot decompress the ${encoding} request body: ${(e as Error).message}`);
    }
  }
  return body;
}

function parseMultipart(body: Buffer, boundary: string): [string, string][] {
  if (boundary === '') throw err.badArguments('multipart/form-data without a boundary');
  const text = body.toString('utf8');
  const delimiter = `--${boundary}`;
  const parts: [string, string][] = [];
  for (const chunk of text.split(delimiter).slice(1)) {
    if (chunk.startsWith('--')) break;
    const part = chunk.replace(/^\r?\n/, '').replace(/\r?\n$/, '');
    const split = part.search(/\r?\n\r?\n/);
    if (split < 0) throw err.badArguments('malformed multipart/form-data part');
    const head = part.slice(0, split);
    const value = part.slice(split).replace(/^\r?\n\r?\n/, '');
    const name = /content-disposition:[^\r\n]*\bname="([^"]*)"/i.exec(head)?.[1];
    if (name === undefined) throw err.badArguments('multipart/form-data part without a name');
    parts.push([name, value]);
  }
  return parts;
}

// ---------------------------------------------------------------------------
// Query parameters
//
// chDB binds `{name:Type}` placeholders in the engine (values never enter the
// SQL text), the way a ClickHouse server binds `param_<name>`. The HTTP value is
// ClickHouse's escaped-text form; chDB's binder takes a plain string and escapes
// it again, so scalar values are unescaped first (the engine sees the exact
// text the client sent). Composite values (Array, Tuple, Map) are in their
// literal form (`['a','b\\'c']`): without backslashes or control characters they
// pass through as they are; with them, they are parsed into JS arrays, tuples,
// maps, strings and numbers, which chDB's binder writes back as literals.

const COMPOSITE_TYPE = /^(Array|Tuple|Map|Nested|Variant|Dynamic|JSON|Object|Point|Ring|LineString|MultiLineString|Polygon|MultiPolygon)\b/i;

function decodeParam(name: string, raw: string, type: string | undefined): unknown {
  if (raw === '\\N') return null;
  let inner = (type ?? 'String').trim();
  for (;;) {
    const wrapped = /^(?:Nullable|LowCardinality)\s*\((.*)\)$/is.exec(inner);
    if (wrapped === null) break;
    inner = (wrapped[1] ?? '').trim();
  }
  if (COMPOSITE_TYPE.test(inner)) {
    return /[\\\x00-\x1f]/.test(raw) ? new LiteralParser(name, raw).parseWhole() : raw;
  }
  return unescapeText(name, raw);
}

/** chDB's binder writes an object of this class name as a tuple literal `(a, b)`
 *  (it matches @clickhouse/client's TupleParam by name). */
class TupleParam {
  constructor(readonly values: unknown[]) {}
}

/** ClickHouse's text form of a composite value (`[..]`, `(..)`, `{k:v}`, quoted
 *  strings with backslash escapes, numbers, NULL, true/false) → JS values. */
class LiteralParser {
  #i = 0;
  constructor(readonly name: string, readonly text: string) {}

  parseWhole(): unknown {
    const value = this.#value();
    this.#ws();
    if (this.#i !== this.text.length) this.#fail();
    return value;
  }

  #fail(): never {
    throw new ServerError(457, 'BAD_QUERY_PARAMETER', `Value ${this.text} cannot be parsed for query parameter '${this.name}'`);
  }

  #ws(): void {
    while (this.#i < this.text.length && /\s/.test(this.text[this.#i]!)) this.#i++;
  }

  #list(close: string, item: () => unknown): unknown[] {
    const items: unknown[] = [];
    this.#i++;
    this.#ws();
    if (this.text[this.#i] === close) {
      this.#i++;
      return items;
    }
    for (;;) {
      items.push(item());
      this.#ws();
      const c = this.text[this.#i++];
      if (c === close) return items;
      if (c !== ',') this.#fail();
    }
  }

  #value(): unknown {
    this.#ws();
    const c = this.text[this.#i];
    if (c === '[') return this.#list(']', () => this.#value());
    if (c === '(') return new TupleParam(this.#list(')', () => this.#value()));
    if (c === '{') {
      const entries = this.#list('}', () => {
        const key = this.#value();
        this.#ws();
        if (this.text[this.#i++] !== ':') this.#fail();
        return [key, this.#value()] as const;
      }) as (readonly [unknown, unknown])[];
      return new Map(entries);
    }
    if (c === "'") {
      let j = this.#i + 1;
      while (j < this.text.length && this.text[j] !== "'") j += this.text[j] === '\\' ? 2 : 1;
      if (j >= this.text.length) this.#fail();
      const body = this.text.slice(this.#i + 1, j);
      this.#i = j + 1;
      return unescapeText(this.name, body);
    }
    const m = /[^\s,:\]\)\}]+/y;
    m.lastIndex = this.#i;
    const token = m.exec(this.text)?.[0];
    if (token === undefined) this.#fail();
    this.#i += token.length;
    if (/^null$/i.test(token)) return null;
    if (/^true$/i.test(token)) return true;
    if (/^false$/i.test(token)) return false;
    if (/^[-+]?\d+$/.test(token)) {
      const n = Number(token);
      return Number.isSafeInteger(n) ? n : BigInt(token);
    }
    const f = Number(token);
    if (token.trim() === '' || !Number.isFinite(f)) this.#fail();
    return f;
  }
}

const SIMPLE_ESCAPES: Readonly<Record<string, string>> = {
  b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', '0': '\0', a: '\x07', v: '\x0b', e: '\x1b', N: '',
};

/** ClickHouse's escaped text (readEscapedString) → the string it denotes. */
function unescapeText(name: string, raw: string): string {
  if (!raw.includes('\\')) return raw;
  const bytes: Buffer[] = [];
  let run = '';
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i]!;
    if (c !== '\\') {
      run += c;
      continue;
    }
    const next = raw[i + 1];
    if (next === undefined) {
      run += '\\';
      break;
    }
    i++;
    if (next === 'x' && /^[0-9a-fA-F]{2}$/.test(raw.slice(i + 1, i + 3))) {
      bytes.push(Buffer.from(run, 'utf8'), Buffer.from([parseInt(raw.slice(i + 1, i + 3), 16)]));
      run = '';
      i += 2;
      continue;
    }
    run += SIMPLE_ESCAPES[next] ?? next;
  }
  if (bytes.length === 0) return run;
  bytes.push(Buffer.from(run, 'utf8'));
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(bytes));
  } catch {
    throw err.notImplemented(`query parameter ${name}: \\x escapes that are not UTF-8 are not supported by this test server`);
  }
}

/** Lines of `text` with something other than whitespace, without splitting it. */
function countNonBlankLines(text: string): number {
  let lines = 0;
  let blank = true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10) {
      if (!blank) lines++;
      blank = true;
    } else if (blank && c !== 32 && c !== 9 && c !== 13) {
      blank = false;
    }
  }
  return blank ? lines : lines + 1;
}

// ---------------------------------------------------------------------------
// A small lexer over the query text, for what the HTTP layer must know without
// parsing SQL: the placeholders and their types, the query kind, the output
// format, where inline INSERT data starts, and whether a second statement follows.

interface ScannedQuery {
  placeholders: Map<string, string>;
  /** The first keyword, upper-cased ('(' for a parenthesised query). */
  kind: string;
  /** The name in a trailing `FORMAT <name>` (the output format). */
  format: string | null;
  /** An INSERT's `FORMAT <name>` (the inline data's format). */
  inputFormat: string | null;
  /** For INSERT … FORMAT X / VALUES: where the inline data starts. */
  dataStart: number | null;
  multiStatement: boolean;
}

const WORD = /[A-Za-z_][A-Za-z0-9_$]*/y;
const PLACEHOLDER_HEAD = /\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*/y;

export function scanQuery(sql: string): ScannedQuery {
  const out: ScannedQuery = { placeholders: new Map(), kind: '', format: null, inputFormat: null, dataStart: null, multiStatement: false };
  const n = sql.length;
  let depth = 0;
  let i = 0;

  /** Skips whitespace and comments from `at`; returns the next significant index. */
  const skipTrivia = (at: number): number => {
    let j = at;
    for (;;) {
      while (j < n && /\s/.test(sql[j]!)) j++;
      if (sql.startsWith('--', j) || (sql[j] === '#' && (sql[j + 1] === ' ' || sql[j + 1] === '!'))) {
        const eol = sql.indexOf('\n', j);
        j = eol < 0 ? n : eol + 1;
      } else if (sql.startsWith('/*', j)) {
        let level = 0;
        while (j < n) {
          if (sql.startsWith('/*', j)) { level++; j += 2; }
          else if (sql.startsWith('*/', j)) { level--; j += 2; if (level === 0) break; }
          else j++;
        }
      } else {
        return j;
      }
    }
  };
  /** End (exclusive) of a quoted token starting at `at`. */
  const quotedEnd = (at: number): number => {
    const q = sql[at];
    let j = at + 1;
    while (j < n) {
      const c = sql[j];
      if (c === '\\') j += 2;
      else if (c === q) {
        if (sql[j + 1] === q) j += 2;
        else return j + 1;
      } else j++;
    }
    return n;
  };
  /** An identifier (bare or quoted) at `at`, or null. */
  const identifierAt = (at: number): { name: string; end: number } | null => {
    const c = sql[at];
    if (c === '`' || c === '"') {
      const end = quotedEnd(at);
      return { name: sql.slice(at + 1, end - 1), end };
    }
    WORD.lastIndex = at;
    const m = WORD.exec(sql);
    return m === null ? null : { name: m[0], end: at + m[0].length };
  };

  while (i < n) {
    i = skipTrivia(i);
    if (i >= n) break;
    const c = sql[i]!;
    if (c === ';') {
      out.multiStatement = skipTrivia(i + 1) < n;
      break;
    }
    if (c === "'" || c === '"' || c === '`') {
      if (out.kind === '' && c !== "'") out.kind = '?';
      i = quotedEnd(i);
      continue;
    }
    if (c === '$') {
      const tag = /\$([A-Za-z0-9_]*)\$/y;
      tag.lastIndex = i;
      const m = tag.exec(sql);
      if (m !== null) {
        const close = sql.indexOf(m[0], i + m[0].length);
        i = close < 0 ? n : close + m[0].length;
        continue;
      }
      i++;
      continue;
    }
    if (c === '{') {
      PLACEHOLDER_HEAD.lastIndex = i;
      const head = PLACEHOLDER_HEAD.exec(sql);
      if (head !== null) {
        // The type runs to the `}` outside parentheses and quotes.
        let j = i + head[0].length;
        let parens = 0;
        while (j < n && !(sql[j] === '}' && parens === 0)) {
          const d = sql[j]!;
          if (d === "'" || d === '"' || d === '`') { j = quotedEnd(j); continue; }
          if (d === '(') parens++;
          else if (d === ')') parens--;
          j++;
        }
        const type = sql.slice(i + head[0].length, j).trim();
        if (j < n && /^[A-Za-z]/.test(type)) {
          out.placeholders.set(head[1]!, type);
          i = j + 1;
          continue;
        }
      }
      i++;
      continue;
    }
    if (c === '(') {
      if (out.kind === '') out.kind = '(';
      depth++;
      i++;
      continue;
    }
    if (c === ')') {
      depth--;
      i++;
      continue;
    }
    if (/[0-9]/.test(c)) {
      const m = /[0-9A-Za-z_.]+/y;
      m.lastIndex = i;
      i += m.exec(sql)?.[0].length ?? 1;
      continue;
    }
    WORD.lastIndex = i;
    const word = WORD.exec(sql);
    if (word === null) {
      i++;
      continue;
    }
    const upper = word[0].toUpperCase();
    i += word[0].length;
    if (out.kind === '') out.kind = upper;
    if (depth !== 0) continue;
    if (out.kind === 'INSERT' && upper === 'VALUES') {
      out.dataStart = i;
      break;
    }
    if (upper === 'FORMAT') {
      const at = skipTrivia(i);
      const name = identifierAt(at);
      if (name === null) continue;
      if (out.kind === 'INSERT') {
        // The input format; the data follows it.
        out.inputFormat = name.name;
        out.dataStart = name.end;
        break;
      }
      const after = skipTrivia(name.end);
      WORD.lastIndex = after;
      const following = WORD.exec(sql)?.[0].toUpperCase();
      if (after >= n || sql[after] === ';' || following === 'SETTINGS') {
        out.format = name.name;
        i = name.end;
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Answers

function toServerError(e: unknown): ServerError {
  if (e instanceof ServerError) return e;
  const message = e instanceof Error ? e.message : String(e);
  const code = (e as { clickhouseCode?: unknown } | null)?.clickhouseCode;
  // chDB's message is ClickHouse's own `Code: N. DB::Exception: text. (NAME)`,
  // sometimes nested; keep the innermost text and name.
  const m = message.length > 100_000
    ? null
    : /^(?:Code: \d+\. DB::Exception: )+([\s\S]*?)(?:\. \(([A-Z0-9_]+)\)(?: \(version [^)]*\))?)+\s*$/.exec(message);
  if (typeof code === 'number' && m !== null) return new ServerError(code, m[2] ?? 'UNKNOWN', m[1] ?? message);
  const named = /\(([A-Z][A-Z0-9_]{2,})\)\s*$/.exec(message);
  if (typeof code === 'number') return new ServerError(code, named?.[1] ?? 'UNKNOWN_EXCEPTION', message);
  if ((e as { code?: unknown } | null)?.code === 'CHDB_BIND') return new ServerError(457, 'BAD_QUERY_PARAMETER', message);
  return new ServerError(1001, 'STD_EXCEPTION', message);
}

function sendError(res: ServerResponse, e: ServerError, version: string, status?: number): void {
  const body = `Code: ${e.code}. DB::Exception: ${e.message.replace(/\.$/, '')}. (${e.type}) (version ${version})\n`;
  res.writeHead(status ?? STATUS_BY_ERROR[e.type] ?? 500, {
    'Content-Type': 'text/plain; charset=UTF-8',
    'X-ClickHouse-Exception-Code': String(e.code),
    'Content-Length': String(Buffer.byteLength(body)),
  });
  res.end(body);
}

function contentType(format: string): string {
  if (/^(JSONEachRow|JSONStringsEachRow|JSONCompactEachRow|JSONCompactStringsEachRow|JSONLines|NDJSON|JSONObjectEachRow)$/i.test(format)) {
    return 'application/x-ndjson; charset=UTF-8';
  }
  if (/^JSON/i.test(format)) return 'application/json; charset=UTF-8';
  if (/^(TabSeparated|TSV)/i.test(format)) return 'text/tab-separated-values; charset=UTF-8';
  if (/^CSV/i.test(format)) return 'text/csv; charset=UTF-8; header=absent';
  return 'text/plain; charset=UTF-8';
}

function quoteIdentifier(name: string): string {
  return `\`${name.replace(/\\/g, '\\\\').replace(/`/g, '\\`')}\``;
}

function quoteString(value: string): string {
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

// ---------------------------------------------------------------------------
// The server as a child process

export interface SpawnedClickHouseHttpServer {
  url: string;
  port: number;
  child: ChildProcess;
  /** Resolves with the exit code (or null when killed by a signal) once the process is gone. */
  exited: Promise<number | null>;
  /** SIGTERM (clean: chDB closed), or SIGKILL for a crash; resolves once the process is gone. */
  kill(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>;
}

const MAIN = fileURLToPath(new URL('./clickhouse-http-server-main.ts', import.meta.url));

/**
 * Starts the server in a child process (this process never loads chDB). The child
 * runs with this process's Node options (`process.execArgv`), which is how it gets
 * the TypeScript loader tap runs tests with.
 */
export async function spawnClickHouseHttpServer(
  opts: ClickHouseHttpServerOptions & { startTimeoutMs?: number; onStderr?: (line: string) => void },
): Promise<SpawnedClickHouseHttpServer> {
  const args = [...process.execArgv, MAIN, '--data-dir', opts.dataDir, '--port', String(opts.port ?? 0)];
  if (opts.user !== undefined) args.push('--user', opts.user);
  // The password goes through the environment, not the (world-readable) command line.
  const env = { ...process.env, ...(opts.password !== undefined ? { CLICKHOUSE_HTTP_SERVER_PASSWORD: opts.password } : {}) };
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
    if (stderr.length > 64_000) stderr = stderr.slice(-32_000);
    if (opts.onStderr) for (const line of chunk.split('\n')) if (line !== '') opts.onStderr(line);
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the ClickHouse HTTP server did not start within ${opts.startTimeoutMs ?? 30_000} ms\n${stderr}`));
    }, opts.startTimeoutMs ?? 30_000);
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      const m = /^listening (\S+)$/m.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the ClickHouse HTTP server exited with ${code} before listening\n${stderr}`));
    });
  });
  return {
    url,
    port: Number(new URL(url).port),
    child,
    exited,
    async kill(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}

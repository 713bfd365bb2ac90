// The ClickHouse HTTP test server (test/support/clickhouse-http-server.ts): its
// HTTP interface, @clickhouse/client against it, the real audit store over it
// (through outages: SIGTERM and SIGKILL, then a restart on the same port and data
// directory), and the shared audit-store suite run against it.
//
// The server runs in a child process, so this process never opens chDB, except
// in the one in-process subtest (pause/resume), which uses its own data directory.
import { entryHash } from '../../shared/audit/entry-json.js';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { auditRecord as record } from '../support/audit-records.js';
import { runTestFileInChild } from '../support/test-file-in-child.js';
import { ClickHouseError, ClickHouseLogLevel, createClient, TupleParam } from '@clickhouse/client';
import { ClickHouseAuditStore } from '../../shared/stores/clickhouse/clickhouse-audit-store.js';
import {
  scanQuery,
  spawnClickHouseHttpServer,
  startClickHouseHttpServer,
  type SpawnedClickHouseHttpServer,
} from '../support/clickhouse-http-server.js';

const USER = 'guard';
const PASSWORD = "s3cret pa:ss'word";
const DATABASE = 'guard_audit';

const dataDir = mkdtempSync(join(tmpdir(), 'ch-http-server-test-'));
let server: SpawnedClickHouseHttpServer | null = null;
t.teardown(async () => {
  await server?.kill('SIGTERM');
  rmSync(dataDir, { recursive: true, force: true });
});
server = await spawnClickHouseHttpServer({ dataDir, user: USER, password: PASSWORD });
const PORT = server.port;
const BASE = server.url;
const AUTH = { authorization: `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}` };
/** CLICKHOUSE_URL as the service takes it: user, password and database in the URL. */
const STORE_URL = `http://${encodeURIComponent(USER)}:${encodeURIComponent(PASSWORD)}@127.0.0.1:${PORT}/${DATABASE}`;

async function restart(signal: 'SIGTERM' | 'SIGKILL'): Promise<void> {
  await server?.kill(signal);
  server = null;
  server = await spawnClickHouseHttpServer({ dataDir, port: PORT, user: USER, password: PASSWORD });
}

/** POST a query; the URL parameters are given as an object. */
async function post(params: Record<string, string>, body: string | Uint8Array<ArrayBuffer>, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${BASE}/?${new URLSearchParams(params).toString()}`, { method: 'POST', headers: { ...AUTH, ...headers }, body });
}


t.test('health endpoints answer Ok. without credentials', async (t) => {
  for (const path of ['/ping', '/', '/replicas_status']) {
    const res = await fetch(`${BASE}${path}`);
    t.equal(res.status, 200, path);
    t.equal(await res.text(), 'Ok.\n', path);
  }
  const head = await fetch(`${BASE}/ping`, { method: 'HEAD' });
  t.equal(head.status, 200, 'HEAD /ping');
  const unknown = await fetch(`${BASE}/nope`);
  t.equal(unknown.status, 404);
  await unknown.text();
});

t.test('authentication: basic, X-ClickHouse headers, URL parameters; failures are 516', async (t) => {
  const q = encodeURIComponent('SELECT 1');
  const none = await fetch(`${BASE}/?query=${q}`);
  t.equal(none.status, 403, 'no credentials');
  t.equal(none.headers.get('x-clickhouse-exception-code'), '516');
  t.match(await none.text(), /^Code: 516\. DB::Exception: default: Authentication failed: .*\(AUTHENTICATION_FAILED\) \(version [\d.]+\)\n$/);
  const wrong = await fetch(`${BASE}/?query=${q}`, { headers: { authorization: `Basic ${Buffer.from(`${USER}:nope`).toString('base64')}` } });
  t.equal(wrong.status, 403, 'wrong password');
  t.equal(wrong.headers.get('x-clickhouse-exception-code'), '516');
  await wrong.text();
  const basic = await fetch(`${BASE}/?query=${q}`, { headers: AUTH });
  t.equal(await basic.text(), '1\n', 'basic auth');
  const headers = await fetch(`${BASE}/?query=${q}`, { headers: { 'X-ClickHouse-User': USER, 'X-ClickHouse-Key': PASSWORD } });
  t.equal(await headers.text(), '1\n', 'X-ClickHouse-User / X-ClickHouse-Key');
  const inUrl = await fetch(`${BASE}/?${new URLSearchParams({ query: 'SELECT 1', user: USER, password: PASSWORD }).toString()}`);
  t.equal(await inUrl.text(), '1\n', 'user and password URL parameters');
});

t.test('queries: URL query + body, formats, headers', async (t) => {
  const queryId = randomUUID();
  const res = await post({ query_id: queryId }, 'SELECT number, toString(number) AS s FROM system.numbers LIMIT 2');
  t.equal(res.status, 200);
  t.equal(await res.text(), '0\t0\n1\t1\n', 'TabSeparated by default');
  t.equal(res.headers.get('x-clickhouse-query-id'), queryId, 'the query id sent is echoed');
  t.equal(res.headers.get('x-clickhouse-format'), 'TabSeparated');
  t.ok(res.headers.get('x-clickhouse-timezone'));
  const summary = JSON.parse(res.headers.get('x-clickhouse-summary') ?? '{}') as Record<string, string>;
  t.equal(summary.read_rows, '2', 'X-ClickHouse-Summary');

  const joined = await post({ query: 'SELECT 41 +' }, '1 AS x FORMAT JSONEachRow');
  t.equal(await joined.text(), '{"x":42}\n', 'the URL query continues in the body');
  t.equal(joined.headers.get('x-clickhouse-format'), 'JSONEachRow');
  t.match(joined.headers.get('content-type'), /ndjson/);

  const get = await fetch(`${BASE}/?${new URLSearchParams({ query: "SELECT 1 AS a, 'x' AS b", default_format: 'JSONCompactEachRow' }).toString()}`, { headers: AUTH });
  t.match(await get.text(), /^\[1, ?"x"\]\n$/, 'GET with default_format');

  const json = await post({}, "SELECT toUInt64(18446744073709551615) AS big FORMAT JSON");
  const doc = await json.text();
  t.match(doc, /"rows": 1/, 'FORMAT JSON');
  t.match(doc, /"big": "?18446744073709551615"?/, 'UInt64 exact');
  const quoted = await post({ output_format_json_quote_64bit_integers: '1' }, 'SELECT toUInt64(5) AS n FORMAT JSONEachRow');
  t.equal(await quoted.text(), '{"n":"5"}\n', 'settings as URL parameters reach the engine');
});

t.test('errors carry ClickHouse codes, names and statuses', async (t) => {
  const cases: [string, Record<string, string>, string, number, number, string][] = [
    ['syntax error', {}, 'SELEC 1', 400, 62, 'SYNTAX_ERROR'],
    ['unknown table', {}, 'SELECT * FROM no_such_table', 404, 60, 'UNKNOWN_TABLE'],
    ['unknown setting', { no_such_setting: '1' }, 'SELECT 1', 404, 115, 'UNKNOWN_SETTING'],
    ['unknown database', { database: 'no_such_db' }, 'SELECT 1', 404, 81, 'UNKNOWN_DATABASE'],
    ['two statements', {}, 'SELECT 1; SELECT 2', 400, 62, 'SYNTAX_ERROR'],
    ['missing parameter', {}, 'SELECT {x:String}', 500, 456, 'UNKNOWN_QUERY_PARAMETER'],
    ['bad parameter', { param_x: 'abc' }, 'SELECT {x:UInt8}', 500, 457, 'BAD_QUERY_PARAMETER'],
    ['native compression', { decompress: '1' }, 'SELECT 1', 501, 48, 'NOT_IMPLEMENTED'],
  ];
  for (const [name, params, sql, status, code, type] of cases) {
    const res = await post(params, sql);
    t.equal(res.status, status, `${name}: status`);
    t.equal(res.headers.get('x-clickhouse-exception-code'), String(code), `${name}: code header`);
    t.match(await res.text(), new RegExp(`^Code: ${code}\\. DB::Exception: .+\\. \\(${type}\\) \\(version [\\d.]+\\)\\n$`, 's'), `${name}: body`);
  }
  const ddlOverGet = await fetch(`${BASE}/?${new URLSearchParams({ query: 'CREATE TABLE x (a UInt8) ENGINE = Memory' }).toString()}`, { headers: AUTH });
  t.equal(ddlOverGet.headers.get('x-clickhouse-exception-code'), '164', 'GET is read-only');
  t.match(await ddlOverGet.text(), /READONLY/);
  const ok = await post({}, 'SELECT 1');
  t.equal(await ok.text(), '1\n', 'the session still works after errors');
});

t.test('settings apply to one query only', async (t) => {
  const set = await post({ insert_deduplication_token: 'tok-1', max_block_size: '777' }, "SELECT getSetting('insert_deduplication_token'), getSetting('max_block_size')");
  t.equal(await set.text(), 'tok-1\t777\n');
  const after = await post({}, "SELECT getSetting('insert_deduplication_token'), getSetting('max_block_size') = 777");
  t.equal(await after.text(), '\t0\n', 'the next query without them runs on the defaults');
  const failed = await post({ max_block_size: '5', no_such_setting: '1' }, 'SELECT 1');
  t.equal(failed.status, 404);
  await failed.text();
  const clean = await post({}, "SELECT getSetting('max_block_size') = 5");
  t.equal(await clean.text(), '0\n', 'a failed SET leaves nothing behind');
});

t.test('insert with the rows in the body, gzip both ways, multipart parameters', async (t) => {
  const table = `t_${randomUUID().replaceAll('-', '')}`;
  t.equal((await post({}, `CREATE TABLE ${table} (id UInt32, s String) ENGINE = MergeTree ORDER BY id`)).status, 200);
  const rows = '{"id":1,"s":"a;b"}\n{"id":2,"s":"line\\nbreak"}\n';
  const ins = await post({ query: `INSERT INTO ${table} FORMAT JSONEachRow` }, rows);
  t.equal(ins.status, 200);
  t.equal(JSON.parse(ins.headers.get('x-clickhouse-summary') ?? '{}').written_rows, '2');
  const empty = await post({ query: `INSERT INTO ${table} FORMAT JSONEachRow` }, '');
  t.equal(empty.status, 200, 'an insert without rows is a no-op');
  const zipped = await post({ query: `INSERT INTO ${table} FORMAT JSONEachRow` }, new Uint8Array(gzipSync('{"id":3,"s":"zipped"}\n')), { 'content-encoding': 'gzip' });
  t.equal(zipped.status, 200, 'a gzip request body');
  const read = await post({ enable_http_compression: '1' }, `SELECT id, s FROM ${table} ORDER BY id FORMAT JSONEachRow`, { 'accept-encoding': 'gzip' });
  t.equal(read.headers.get('content-encoding'), 'gzip', 'a gzip response');
  t.equal(await read.text(), '{"id":1,"s":"a;b"}\n{"id":2,"s":"line\\nbreak"}\n{"id":3,"s":"zipped"}\n');

  // TabSeparated as the audit store sends it: the statement in the URL, the rows
  // in the body, the line break between them not a row (regression: the stand-in
  // wrote it into the file its engine read, and with variable columns allowed it
  // became a row of defaults).
  const tsv = `t_${randomUUID().replaceAll('-', '')}`;
  t.equal((await post({}, `CREATE TABLE ${tsv} (id UInt32, s String, n UInt8 DEFAULT 7) ENGINE = MergeTree ORDER BY id`)).status, 200);
  const tsvIns = await post({ query: `INSERT INTO ${tsv} (id, s, n) FORMAT TabSeparated`, input_format_tsv_allow_variable_number_of_columns: '1' }, '1\ttab\\there\t1\n2\tshort\n');
  t.equal(tsvIns.status, 200);
  t.equal(JSON.parse(tsvIns.headers.get('x-clickhouse-summary') ?? '{}').written_rows, '2');
  t.equal(await (await post({}, `SELECT id, s, n FROM ${tsv} ORDER BY id`)).text(), '1\ttab\\there\t1\n2\tshort\t7\n', 'two rows, escapes kept, a missing field its column\'s DEFAULT');
  const sameLine = await post({}, `INSERT INTO ${tsv} (id, s) FORMAT TabSeparated 3\tsame line\n`);
  t.equal(sameLine.status, 200);
  t.equal(await (await post({}, `SELECT count(), max(id) FROM ${tsv}`)).text(), '3\t3\n', 'data on the statement\'s line');

  const boundary = 'xyz123';
  const multipart = [
    `--${boundary}\r\nContent-Disposition: form-data; name="query"\r\n\r\nSELECT s FROM ${table} WHERE id IN {ids:Array(UInt32)} AND s != {not:String} ORDER BY id\r\n`,
    `--${boundary}\r\nContent-Disposition: form-data; name="param_ids"\r\n\r\n[1,3]\r\n`,
    `--${boundary}\r\nContent-Disposition: form-data; name="param_not"\r\n\r\nit\\'s\r\n`,
    `--${boundary}--\r\n`,
  ].join('');
  const mp = await post({}, multipart, { 'content-type': `multipart/form-data; boundary=${boundary}` });
  t.equal(await mp.text(), 'a;b\nzipped\n', 'query and parameters as multipart/form-data');
});

t.test('the query scanner', async (t) => {
  const s = scanQuery("SELECT '{a:String}' AS \"x;\" /* {b:UInt8}; */ -- ;\n, {c:DateTime64(3, 'UTC')} FORMAT JSONEachRow");
  t.strictSame([...s.placeholders], [['c', "DateTime64(3, 'UTC')"]], 'placeholders outside literals and comments');
  t.equal(s.format, 'JSONEachRow');
  t.equal(s.multiStatement, false);
  t.equal(scanQuery('SELECT 1;').multiStatement, false, 'one trailing semicolon');
  t.equal(scanQuery('SELECT 1; -- done').multiStatement, false);
  t.equal(scanQuery("SELECT ';'; DROP TABLE x").multiStatement, true);
  const ins = scanQuery('INSERT INTO t FORMAT JSONEachRow\n{"a":"; {x:String}"}');
  t.equal(ins.kind, 'INSERT');
  t.equal(ins.placeholders.size, 0, 'inline data is not scanned');
  t.equal(ins.dataStart, 'INSERT INTO t FORMAT JSONEachRow'.length);
  t.equal(ins.inputFormat, 'JSONEachRow');
  t.equal(ins.format, null);
  t.equal(scanQuery('SELECT format FROM t').format, null, 'a column named format is not a FORMAT clause');
});

t.test('@clickhouse/client: parameters, settings, commands, inserts, errors', async (t) => {
  const client = createClient({ url: BASE, username: USER, password: PASSWORD });
  t.teardown(() => client.close());
  t.equal((await client.ping()).success, true);

  const tricky = `it's a "test" \\ with\ttab\nnewline, ünïcödé 🚀 and ' OR 1=1 --`;
  const rows = await (await client.query({
    query: `SELECT {s:String} AS s, {big:UInt64} AS big, {arr:Array(String)} AS arr, {m:Map(String, UInt8)} AS m,
                   {tup:Tuple(UInt8, String)} AS tup, {n:Nullable(String)} AS n, {d:DateTime64(3, 'UTC')} AS d,
                   {u:UUID} AS u, {b:Bool} AS b, {plain:Array(UInt32)} AS plain`,
    query_params: {
      s: tricky,
      big: 18446744073709551615n,
      arr: ['a', "b'c", 'd\\e', 'tab\there'],
      m: new Map([["k'1", 1], ['k2', 2]]),
      tup: new TupleParam([7, "x'y"]),
      n: null,
      d: new Date('2026-03-01T12:00:00.123Z'),
      u: '0f0e0d0c-0b0a-4908-8706-050403020100',
      b: true,
      plain: [1, 2, 3],
    },
    format: 'JSONEachRow',
    clickhouse_settings: { output_format_json_quote_64bit_integers: 1 },
  })).json<Record<string, unknown>>();
  t.strictSame(rows, [{
    s: tricky,
    big: '18446744073709551615',
    arr: ['a', "b'c", 'd\\e', 'tab\there'],
    m: { "k'1": 1, k2: 2 },
    tup: [7, "x'y"],
    n: null,
    d: '2026-03-01 12:00:00.123',
    u: '0f0e0d0c-0b0a-4908-8706-050403020100',
    b: true,
    plain: [1, 2, 3],
  }], 'every parameter arrives as the value sent');

  const table = `c_${randomUUID().replaceAll('-', '')}`;
  await client.command({ query: `CREATE TABLE ${table} (id UInt32, v String) ENGINE = MergeTree ORDER BY id` });
  await client.insert({ table, values: [{ id: 1, v: 'one' }, { id: 2, v: 'two' }], format: 'JSONEachRow' });
  const exec = await client.exec({ query: `SELECT count() AS n FROM ${table} FORMAT JSONEachRow` });
  let text = '';
  for await (const chunk of exec.stream) text += String(chunk);
  t.equal(text, '{"n":2}\n', 'exec');

  const compressed = createClient({ url: BASE, username: USER, password: PASSWORD, compression: { request: true, response: true } });
  t.teardown(() => compressed.close());
  await compressed.insert({ table, values: [{ id: 3, v: 'three' }], format: 'JSONEachRow' });
  t.strictSame(await (await compressed.query({ query: `SELECT v FROM ${table} ORDER BY id`, format: 'JSONEachRow' })).json(),
    [{ v: 'one' }, { v: 'two' }, { v: 'three' }], 'compressed requests and responses');

  const multipart = createClient({ url: BASE, username: USER, password: PASSWORD, use_multipart_params: true });
  t.teardown(() => multipart.close());
  t.strictSame(await (await multipart.query({ query: `SELECT v FROM ${table} WHERE v = {v:String}`, query_params: { v: 'two' }, format: 'JSONEachRow' })).json(),
    [{ v: 'two' }], 'parameters sent as multipart/form-data');

  const syntax = await client.query({ query: 'SELEC 1' }).then(() => null, (e: unknown) => e);
  t.ok(syntax instanceof ClickHouseError, 'a ClickHouseError');
  t.match(syntax, { code: '62', type: 'SYNTAX_ERROR' });
  t.match(await client.command({ query: 'DROP TABLE no_such_table_here' }).catch((e: unknown) => e), { code: '60', type: 'UNKNOWN_TABLE' });
  t.match(await client.insert({ table: 'no_such_table_here', values: [{ a: 1 }], format: 'JSONEachRow' }).catch((e: unknown) => e),
    { code: '60', type: 'UNKNOWN_TABLE' });
  t.match(await client.insert({ table, values: [{ id: 'not a number', v: 'x' }], format: 'JSONEachRow' }).catch((e: unknown) => e),
    { code: /^\d+$/, type: /^CANNOT_PARSE/ }, 'bad rows');

  const wrong = createClient({ url: BASE, username: USER, password: 'wrong' });
  t.teardown(() => wrong.close());
  t.match(await wrong.query({ query: 'SELECT 1' }).catch((e: unknown) => e), { code: '516', type: 'AUTHENTICATION_FAILED' });
});

t.test('the audit store over the server, through outages', async (t) => {
  const store = await ClickHouseAuditStore.open({ url: STORE_URL, dataDir, retentionDays: 30 });
  t.teardown(() => store.close());
  t.equal(store.backend, 'http');
  await t.resolves(store.ping(), 'ping');

  const org = randomUUID();
  const agents = [randomUUID(), randomUUID()];
  const base = Date.now() - 3_600_000;
  const rows = Array.from({ length: 12 }, (_, i) => record(org, {
    timestamp: new Date(base + i * 60_000).toISOString(),
    agentId: agents[i % 2]!,
    agentName: i % 2 === 0 ? 'even' : 'odd',
    decision: i % 3 === 0 ? 'denied' : 'allowed',
    toolName: i < 6 ? 'api.github.com' : 'api.slack.com',
    latencyMs: (i + 1) * 10,
    requestBytes: 5_000_000_000 + i,
    reasoning: `row ${i}: "quoted" \\ and 'single'`,
  }));
  await store.insert(rows.slice(0, 4));
  const token = `batch-${randomUUID()}`;
  await store.insert(rows.slice(4), token);
  await store.insert(rows.slice(4), token);
  t.equal(await store.count(org), 12, 'a batch inserted twice with one token is stored once');

  const newestFirst = [...rows].reverse();
  const page = await store.list(org, {}, 5, 0);
  t.equal(page.total, 12);
  const hashed = newestFirst.map((r) => ({ ...r, entryHash: entryHash(r), batchId: null }));
  t.strictSame(page.rows, hashed.slice(0, 5), 'records read back field for field (with their entry_hash), newest first');
  t.strictSame((await store.list(org, {}, 5, 10)).rows, hashed.slice(10), 'the last page');
  const denied = await store.list(org, { decision: 'denied', agentId: agents[0] }, 50, 0);
  t.strictSame(denied.rows.map((r) => r.id), newestFirst.filter((r) => r.decision === 'denied' && r.agentId === agents[0]).map((r) => r.id),
    'filters: decision and agent');
  const slack = await store.list(org, { toolName: 'api.slack.com', since: rows[8]!.timestamp }, 50, 0);
  t.strictSame(slack.rows.map((r) => r.id), newestFirst.filter((r, i) => r.toolName === 'api.slack.com' && 11 - i >= 8).map((r) => r.id),
    'filters: tool and since');
  t.equal((await store.list(org, { toolName: "x' OR '1'='1" }, 50, 0)).total, 0, 'a filter value is data, not SQL');

  const report = await store.report(org, new Date(base - 1), new Date(), 100, 1);
  t.equal(report.totals.calls, 12);
  t.equal(report.totals.denied, 4);
  t.equal(report.perAgent.length, 2);
  t.strictSame(report.topTools, [{ toolName: 'api.github.com', mcpTool: null, calls: 6, denied: 2 }]);
  t.equal(report.entries.length, 12);

  t.comment('outage 1: SIGTERM');
  await server?.kill('SIGTERM');
  await t.rejects(store.ping(), 'ping rejects while the server is down');
  await t.rejects(store.insert([record(org)], `down-${randomUUID()}`), 'insert rejects while the server is down');
  await restart('SIGTERM');
  await t.resolves(store.ping(), 'the same store answers again after a restart on the same port');
  t.equal(await store.count(org), 12, 'the rows survived the restart');
  const later = record(org);
  await store.insert([later], `after-${randomUUID()}`);
  t.equal(await store.count(org), 13);

  t.comment('outage 2: SIGKILL (a crash)');
  await restart('SIGKILL');
  t.equal(await store.count(org), 13, 'acknowledged inserts survived a crash');
  t.strictSame((await store.list(org, {}, 1, 0)).rows, [{ ...later, entryHash: entryHash(later), batchId: null }]);
});

t.test('the shared audit-store suite passes against the server', async (t) => {
  // The suite's own file, with CLICKHOUSE_URL set and only its "ClickHouse server"
  // test selected (TAP_GREP), so that child never loads chDB either.
  const started = Date.now();
  const { code, out, failed } = await runTestFileInChild('test/integration/audit-store.test.ts', { CLICKHOUSE_URL: STORE_URL, TAP_GREP: '/^ClickHouse server$/' }, 50_000);
  const passed = out.match(/^\s*ok \d+ /gm)?.length ?? 0;
  t.comment(`shared suite against the server: ${passed} ok, ${failed.length} not ok, exit ${code}, ${Date.now() - started} ms`);
  for (const line of out.split('\n').filter((l) => /# (insert|list|report) /.test(l))) t.comment(line.trim());
  t.equal(code, 0, 'the suite passed');
  t.strictSame(failed, [], 'no failing assertion');
  t.match(out, /ok \d+ - ClickHouse server/, 'the server suite ran');
  t.match(out, /ok \d+ - chDB # SKIP/, 'the embedded chDB tests were filtered out');
  if (code !== 0) t.comment(out);
});

t.test('in process: pause and resume simulate an outage; stop closes chDB', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'ch-http-server-inproc-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const inproc = await startClickHouseHttpServer({ dataDir: dir });
  const client = createClient({ url: inproc.url, log: { level: ClickHouseLogLevel.OFF } });
  t.teardown(() => client.close());
  t.equal((await client.ping()).success, true);
  inproc.pause();
  const paused = await fetch(`${inproc.url}/?query=SELECT%201`);
  t.equal(paused.status, 503, 'paused: 503');
  t.equal(paused.headers.get('x-clickhouse-exception-code'), '210');
  await paused.text();
  await t.rejects(client.query({ query: 'SELECT 1' }), 'paused: the client sees an error');
  inproc.resume();
  t.strictSame(await (await client.query({ query: 'SELECT 1 AS x', format: 'JSONEachRow' })).json(), [{ x: 1 }], 'resumed');
  await inproc.stop();
  await inproc.stop();
  const down = await fetch(`${inproc.url}/ping`).then(() => 'answered', (e: unknown) => (e as Error).message);
  t.not(down, 'answered', 'stopped: nothing listens');
});

// The docs and the code in step (the fastify habit: one error registry, and a test
// that keeps the docs' table in step with it):
//   - every code of shared/errors.ts ERRORS is a row of docs/api.md's error table,
//     with the same status, and the table names no other code;
//   - every CONFIG_SPECS variable is a row of the README's configuration table, and
//     the table names no other variable;
//   - every admin route of admin/app.ts ROUTE_TABLE is documented in docs/api.md
//     (as a heading or a table cell `METHOD /path`), with the same auth in the
//     endpoint summary, and docs/api.md documents no admin route the table lacks.
// Each comparison is a pure function over text, and each is also run on a copy of
// the docs with one row broken, so that every check is shown to be able to fail.

import { readFileSync } from 'node:fs';
import t from 'tap';
import { ROUTE_TABLE } from '../../admin/app.js';
import { CONFIG_SPECS } from '../../shared/config.js';
import { ERRORS } from '../../shared/errors.js';

const ROOT = new URL('../../', import.meta.url);
const API_MD = readFileSync(new URL('docs/api.md', ROOT), 'utf8');
const README_MD = readFileSync(new URL('README.md', ROOT), 'utf8');

const ERROR_TABLE_HEADING = '### Error codes';
const CONFIG_SECTION_HEADING = '## Configuration';
const ENDPOINTS_HEADING = '## Endpoints';
const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
/** Served by the listener itself, or as the console's static files (admin/console.ts), not the admin route table. */
const LISTENER_ROUTES = new Set(['GET /health', 'GET /ready', 'GET /metrics', 'GET /openapi.json', 'GET /console']);
const PROXY_PREFIX = '/proxy/';

// --- text helpers --------------------------------------------------------------

/** The text with fenced code blocks blanked out (a `# comment` in YAML is no heading). */
function withoutCodeBlocks(markdown: string): string {
  return markdown.replace(/^```[^\n]*\n[\s\S]*?^```[ \t]*$/gm, '');
}

/** The lines of the section under `heading`, up to the next heading of the same or a higher level. */
function section(markdown: string, heading: string): string[] | null {
  const lines = withoutCodeBlocks(markdown).split('\n');
  const start = lines.findIndex((line) => line.trim() === heading);
  if (start === -1) return null;
  const level = heading.indexOf(' ');
  const out: string[] = [];
  for (const line of lines.slice(start + 1)) {
    const m = /^(#+) /.exec(line);
    if (m && m[1]!.length <= level) break;
    out.push(line);
  }
  return out;
}

/** The cells of a Markdown table row, trimmed; null when the line is not a row. */
function cells(line: string): string[] | null {
  const trimmed = line.trim();
  if (!trimmed.startsWith('|') || !trimmed.endsWith('|')) return null;
  return trimmed.slice(1, -1).split('|').map((cell) => cell.trim());
}

function unquote(cell: string): string {
  return cell.replace(/^`(.*)`$/, '$1');
}

function setDiff<T>(a: Iterable<T>, b: ReadonlySet<T> | ReadonlyMap<T, unknown>): T[] {
  return [...a].filter((x) => !b.has(x));
}

// --- (a) the error table --------------------------------------------------------

/** code → status, from the rows of docs/api.md's error table that start with | `code` |. */
function documentedErrors(markdown: string): Map<string, number> | null {
  const lines = section(markdown, ERROR_TABLE_HEADING);
  if (lines === null) return null;
  const table = new Map<string, number>();
  for (const line of lines) {
    const m = /^\|\s*`([a-z_]+)`\s*\|\s*([^|]*?)\s*\|/.exec(line.trim());
    if (!m) continue;
    table.set(m[1]!, /^\d{3}$/.test(m[2]!) ? Number(m[2]) : NaN);
  }
  return table;
}

function errorTableProblems(registry: Record<string, { status: number }>, markdown: string): string[] {
  const table = documentedErrors(markdown);
  if (table === null) return [`docs/api.md has no '${ERROR_TABLE_HEADING}' section`];
  if (table.size === 0) return ['the error table has no rows'];
  const problems: string[] = [];
  for (const [code, { status }] of Object.entries(registry)) {
    const documented = table.get(code);
    if (documented === undefined) problems.push(`${code} (${status}) has no row in the error table`);
    else if (documented !== status) problems.push(`${code} is ${status} in shared/errors.ts but ${documented} in the docs`);
  }
  for (const code of setDiff(table.keys(), new Set(Object.keys(registry)))) {
    problems.push(`the error table documents ${code}, which shared/errors.ts does not have`);
  }
  return problems;
}

// --- (b) the README configuration table ------------------------------------------

/** The variables of the README's configuration table (rows starting with | `NAME` |). */
function documentedVariables(markdown: string): string[] | null {
  const lines = section(markdown, CONFIG_SECTION_HEADING);
  if (lines === null) return null;
  const names: string[] = [];
  for (const line of lines) {
    const m = /^\|\s*`([A-Z][A-Z0-9_]*)`\s*\|/.exec(line.trim());
    if (m) names.push(m[1]!);
  }
  return names;
}

function configTableProblems(envNames: readonly string[], markdown: string): string[] {
  const documented = documentedVariables(markdown);
  if (documented === null) return [`README.md has no '${CONFIG_SECTION_HEADING}' section`];
  if (documented.length === 0) return ['the configuration table has no rows'];
  const problems: string[] = [];
  const rows = new Set(documented);
  for (const name of envNames) if (!rows.has(name)) problems.push(`${name} is read by shared/config.ts but not in the README's table`);
  for (const name of setDiff(rows, new Set(envNames))) problems.push(`the README's table lists ${name}, which shared/config.ts does not read`);
  for (const name of rows) {
    if (documented.indexOf(name) !== documented.lastIndexOf(name)) problems.push(`the README's table lists ${name} twice`);
  }
  return problems;
}

// --- (c) the admin routes ----------------------------------------------------------

interface RouteRow {
  method: string;
  pattern: string;
  auth: boolean;
}

/** `/agents/:id/policy` and `/agents/{agent_id}/policy` both become `/agents/{}/policy`. */
function normalizeRoute(method: string, path: string): string {
  return `${method} ${path.replace(/:[A-Za-z_]+|\{[^}]*\}/g, '{}').replace(/(.)\/$/, '$1')}`;
}

const ROUTE_TEXT = new RegExp(`^(${METHODS.join('|')}) (/[A-Za-z0-9_./{}:-]*)$`);

/** Every `METHOD /path` written as a heading or as a whole table cell, normalised. */
function documentedRoutes(markdown: string): Set<string> {
  const found = new Set<string>();
  for (const line of withoutCodeBlocks(markdown).split('\n')) {
    const heading = /^#+\s+(.*)$/.exec(line);
    const candidates = heading ? [heading[1]!] : cells(line) ?? [];
    for (const candidate of candidates) {
      const m = ROUTE_TEXT.exec(unquote(candidate.trim()));
      if (m) found.add(normalizeRoute(m[1]!, m[2]!));
    }
  }
  return found;
}

function isAdminRoute(route: string): boolean {
  return !LISTENER_ROUTES.has(route) && !route.slice(route.indexOf(' ') + 1).startsWith(PROXY_PREFIX);
}

function routeProblems(routes: readonly RouteRow[], markdown: string): string[] {
  const documented = new Set([...documentedRoutes(markdown)].filter(isAdminRoute));
  const inCode = new Set(routes.map((r) => normalizeRoute(r.method, r.pattern)));
  if (documented.size === 0) return ['docs/api.md documents no admin route'];
  const problems: string[] = [];
  for (const route of setDiff(inCode, documented)) problems.push(`${route} is in the route table but not documented`);
  for (const route of setDiff(documented, inCode)) problems.push(`docs/api.md documents ${route}, which the route table lacks`);
  return problems;
}

/** The endpoint summary under "## Endpoints": route → its auth cell. */
function summaryAuth(markdown: string): Map<string, string> | null {
  const lines = section(markdown, ENDPOINTS_HEADING);
  if (lines === null) return null;
  const table = new Map<string, string>();
  for (const line of lines) {
    const row = cells(line);
    if (row === null || row.length < 2) continue;
    const m = ROUTE_TEXT.exec(unquote(row[0]!));
    if (m) table.set(normalizeRoute(m[1]!, m[2]!), row[1]!.toLowerCase());
  }
  return table;
}

function summaryAuthProblems(routes: readonly RouteRow[], markdown: string): string[] {
  const table = summaryAuth(markdown);
  if (table === null) return [`docs/api.md has no '${ENDPOINTS_HEADING}' section`];
  const problems: string[] = [];
  for (const route of routes) {
    const key = normalizeRoute(route.method, route.pattern);
    const auth = table.get(key);
    const expected = route.auth ? 'jwt' : 'none';
    if (auth === undefined) problems.push(`${key} has no row in the endpoint summary`);
    else if (auth !== expected) problems.push(`${key} needs ${expected} in the route table but the summary says '${auth}'`);
  }
  return problems;
}

// --- the tests -------------------------------------------------------------------

/** The docs with the first line matching `pattern` replaced (or removed when `by` is null). */
function edit(markdown: string, pattern: RegExp, by: string | null): string {
  const lines = markdown.split('\n');
  const i = lines.findIndex((line) => pattern.test(line));
  if (i === -1) throw new Error(`no line matches ${pattern}`);
  if (by === null) lines.splice(i, 1);
  else lines[i] = by;
  return lines.join('\n');
}

const ROUTES: readonly RouteRow[] = ROUTE_TABLE;
const ENV_NAMES = CONFIG_SPECS.map((spec) => spec.env);

t.test('every code of the error registry is a row of the docs error table, with its status, and no other', async (t) => {
  t.same(errorTableProblems(ERRORS, API_MD), []);
  t.equal(documentedErrors(API_MD)?.size, Object.keys(ERRORS).length, 'one row per code');
});

t.test('the error-table check catches a missing row, a wrong status and an unknown code', async (t) => {
  const missing = edit(API_MD, /^\| `not_found` \|/, null);
  t.match(errorTableProblems(ERRORS, missing), [/not_found \(404\) has no row/]);
  const wrongStatus = edit(API_MD, /^\| `conflict` \|/, '| `conflict` | 400 | changed |');
  t.match(errorTableProblems(ERRORS, wrongStatus), [/conflict is 409 in shared\/errors.ts but 400/]);
  const extra = edit(API_MD, /^\| `conflict` \|/, '| `conflict` | 409 | a |\n| `teapot` | 418 | made up |');
  t.match(errorTableProblems(ERRORS, extra), [/documents teapot/]);
  t.match(errorTableProblems(ERRORS, API_MD.replace(ERROR_TABLE_HEADING, '### Errors')), [/no '### Error codes' section/]);
  t.match(errorTableProblems({ ...ERRORS, made_up: { status: 418 } }, API_MD), [/made_up \(418\) has no row/]);
});

t.test('every CONFIG_SPECS variable is a row of the README configuration table, and no other', async (t) => {
  t.same(configTableProblems(ENV_NAMES, README_MD), []);
});

t.test('the configuration-table check catches a missing, an unknown and a repeated variable', async (t) => {
  const missing = edit(README_MD, /^\| `PORT` \|/, null);
  t.match(configTableProblems(ENV_NAMES, missing), [/PORT is read by shared\/config.ts but not in the README/]);
  const extra = edit(README_MD, /^\| `PORT` \|/, '| `PORT` | port | `8080` |\n| `NOT_A_SETTING` | x | y |');
  t.match(configTableProblems(ENV_NAMES, extra), [/lists NOT_A_SETTING/]);
  const twice = edit(README_MD, /^\| `PORT` \|/, '| `PORT` | port | `8080` |\n| `PORT` | again | `8080` |');
  t.match(configTableProblems(ENV_NAMES, twice), [/lists PORT twice/]);
  t.match(configTableProblems([...ENV_NAMES, 'NEW_KNOB'], README_MD), [/NEW_KNOB is read by shared\/config.ts/]);
});

t.test('every admin route of the route table is documented, and no other admin route is', async (t) => {
  t.ok(ROUTES.length > 0, 'the route table is not empty');
  t.same(routeProblems(ROUTES, API_MD), []);
});

t.test('the endpoint summary gives each admin route the auth the route table requires', async (t) => {
  t.same(summaryAuthProblems(ROUTES, API_MD), []);
});

t.test('the route checks catch an undocumented route, a documented route the table lacks and a wrong auth', async (t) => {
  // Remove every mention of one route (its summary row and its heading).
  const undocumented = API_MD.split('\n').filter((line) => !line.includes('DELETE /credentials/{credential_id}')).join('\n');
  t.match(routeProblems(ROUTES, undocumented), [/DELETE \/credentials\/\{\} is in the route table but not documented/]);
  t.match(routeProblems([...ROUTES, { method: 'GET', pattern: '/agents/:id/keys', auth: true }], API_MD), [/GET \/agents\/\{\}\/keys is in the route table/]);
  const invented = `${API_MD}\n### PATCH /agents/{agent_id}\n`;
  t.match(routeProblems(ROUTES, invented), [/documents PATCH \/agents\/\{\}, which the route table lacks/]);
  const inCell = `${API_MD}\n| \`GET /credentials/{credential_id}\` | JWT | x |\n`;
  t.match(routeProblems(ROUTES, inCell), [/documents GET \/credentials\/\{\}/]);
  const wrongAuth = edit(API_MD, /^\| `POST \/auth\/login` \|/, '| `POST /auth/login` | JWT | 200 token |');
  t.match(summaryAuthProblems(ROUTES, wrongAuth), [/POST \/auth\/login needs none/]);
});

t.test('route normalisation: `:id` in code and `{name}` in the docs meet; the listener and proxy are not admin routes', async (t) => {
  t.equal(normalizeRoute('GET', '/agents/:id/proxy-url'), normalizeRoute('GET', '/agents/{agent_id}/proxy-url'));
  t.equal(normalizeRoute('DELETE', '/credentials/:id'), 'DELETE /credentials/{}');
  t.notOk(isAdminRoute('GET /health'));
  t.notOk(isAdminRoute('GET /proxy/{key}/{host}/{path}'));
  t.ok(isAdminRoute('GET /audit'));
  // A YAML comment in a code block is not a heading.
  t.notOk(documentedRoutes('```yaml\n# GET /nowhere\n```\n').has('GET /nowhere'));
  t.ok(documentedRoutes('### GET /somewhere\n').has('GET /somewhere'));
});

// docs/openapi.json in step with the code:
//   - it is OpenAPI 3.1.0 and its info.version is package.json's version;
//   - every route of admin/app.ts ROUTE_TABLE is an operation of the document, and
//     every admin operation of the document is a route of the table (the listener's
//     own paths and the proxy are not admin routes);
//   - a route with `auth: true` requires exactly `bearerAuth`, any other none;
//   - the ErrorCode enum is exactly the codes of shared/errors.ts ERRORS, every
//     error response of a path carries only codes whose registry status is that
//     response's status, and every code is carried by at least one such response;
//   - every `$ref` resolves inside the document, and every `{name}` of a path
//     template is a required path parameter (and no path parameter lacks one).
// Each check is a pure function returning problems, and each is also run on a
// broken copy of the document to show that it can fail.

import { readFileSync } from 'node:fs';
import t from 'tap';
import { ROUTE_TABLE } from '../../admin/app.js';
import { ERRORS } from '../../shared/errors.js';

type Obj = Record<string, unknown>;

const ROOT = new URL('../../', import.meta.url);
const DOC = JSON.parse(readFileSync(new URL('docs/openapi.json', ROOT), 'utf8')) as Obj;
const PACKAGE_VERSION = (JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')) as { version: string }).version;

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;
/** Served by the public listener itself, or as the console's static files (admin/console.ts), not by the admin route table. */
const LISTENER_PATHS = new Set(['/health', '/ready', '/metrics', '/openapi.json', '/console']);
const PROXY_PREFIX = '/proxy/';
const ADMIN_SECURITY = [{ bearerAuth: [] }];

interface RouteRow {
  method: string;
  pattern: string;
  auth: boolean;
}

// --- helpers ---------------------------------------------------------------------

function isObj(value: unknown): value is Obj {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function asObj(value: unknown): Obj {
  return isObj(value) ? value : {};
}

/** The value at a local JSON pointer (`#/a/b`), or undefined. */
function pointer(doc: Obj, ref: string): unknown {
  if (!ref.startsWith('#/')) return undefined;
  let node: unknown = doc;
  for (const raw of ref.slice(2).split('/')) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!isObj(node) && !Array.isArray(node)) return undefined;
    node = (node as Obj)[key];
    if (node === undefined) return undefined;
  }
  return node;
}

/** Follows `$ref`s until an object without one (or a dead end: `{}`). */
function resolve(doc: Obj, value: unknown): Obj {
  let node = value;
  for (let hops = 0; hops < 32 && isObj(node) && typeof node.$ref === 'string'; hops++) node = pointer(doc, node.$ref);
  return asObj(node);
}

/** `/agents/:id/policy` and `/agents/{agent_id}/policy/` both become `/agents/{}/policy`. */
function normalizePath(path: string): string {
  return path.replace(/:[A-Za-z_]+|\{[^}]*\}/g, '{}').replace(/(.)\/$/, '$1');
}

function routeKey(method: string, path: string): string {
  return `${method.toUpperCase()} ${normalizePath(path)}`;
}

function isAdminPath(path: string): boolean {
  return !LISTENER_PATHS.has(path) && !path.startsWith(PROXY_PREFIX);
}

interface Operation {
  path: string;
  method: string;
  item: Obj;
  op: Obj;
}

function operations(doc: Obj): Operation[] {
  const out: Operation[] = [];
  for (const [path, rawItem] of Object.entries(asObj(doc.paths))) {
    const item = resolve(doc, rawItem);
    for (const method of HTTP_METHODS) {
      if (isObj(item[method])) out.push({ path, method, item, op: item[method] });
    }
  }
  return out;
}

function setDiff<T>(a: Iterable<T>, b: ReadonlySet<T>): T[] {
  return [...a].filter((x) => !b.has(x));
}

// --- (a) version -------------------------------------------------------------------

function versionProblems(doc: Obj, packageVersion: string): string[] {
  const problems: string[] = [];
  if (doc.openapi !== '3.1.0') problems.push(`openapi is ${JSON.stringify(doc.openapi)}, not "3.1.0"`);
  const version = asObj(doc.info).version;
  if (version !== packageVersion) problems.push(`info.version is ${JSON.stringify(version)} but package.json has ${packageVersion}`);
  return problems;
}

// --- (b) admin routes both ways --------------------------------------------------------

function routeProblems(doc: Obj, routes: readonly RouteRow[]): string[] {
  const inCode = new Set(routes.map((r) => routeKey(r.method, r.pattern)));
  const documented = new Set(operations(doc).filter((o) => isAdminPath(o.path)).map((o) => routeKey(o.method, o.path)));
  if (documented.size === 0) return ['the document has no admin operation'];
  const problems: string[] = [];
  for (const route of setDiff(inCode, documented)) problems.push(`${route} is in ROUTE_TABLE but not in the document`);
  for (const route of setDiff(documented, inCode)) problems.push(`the document has ${route}, which ROUTE_TABLE lacks`);
  return problems;
}

// --- (c) security ------------------------------------------------------------------------

function securityProblems(doc: Obj, routes: readonly RouteRow[]): string[] {
  const problems: string[] = [];
  const schemes = asObj(asObj(doc.components).securitySchemes);
  const bearer = asObj(schemes.bearerAuth);
  if (bearer.type !== 'http' || bearer.scheme !== 'bearer' || bearer.bearerFormat !== 'JWT') {
    problems.push('components.securitySchemes.bearerAuth is not an http bearer scheme with bearerFormat JWT');
  }
  const metrics = asObj(schemes.metricsToken);
  if (metrics.type !== 'http' || metrics.scheme !== 'bearer') problems.push('components.securitySchemes.metricsToken is not an http bearer scheme');
  const byKey = new Map(operations(doc).map((o) => [routeKey(o.method, o.path), o.op]));
  for (const route of routes) {
    const key = routeKey(route.method, route.pattern);
    const op = byKey.get(key);
    if (op === undefined) continue; // reported by routeProblems
    const effective = op.security ?? doc.security ?? [];
    const expected = route.auth ? ADMIN_SECURITY : [];
    if (JSON.stringify(effective) !== JSON.stringify(expected)) {
      problems.push(`${key} has security ${JSON.stringify(effective)} but ROUTE_TABLE says auth: ${route.auth} (expected ${JSON.stringify(expected)})`);
    }
  }
  return problems;
}

// --- (d) error codes -----------------------------------------------------------------------

/**
 * The codes an error body schema narrows `error` to: a `const` or `enum` on its
 * `properties.error`, through `$ref`, `allOf`, `oneOf` and `anyOf`. The base Error
 * schema's `error` is a `$ref` to the whole ErrorCode enum and so adds nothing.
 */
function errorCodesOf(doc: Obj, schema: unknown, seen = new Set<unknown>()): string[] {
  const s = resolve(doc, schema);
  if (seen.has(s)) return [];
  seen.add(s);
  const out: string[] = [];
  const error = asObj(asObj(s.properties).error);
  if (typeof error.const === 'string') out.push(error.const);
  if (Array.isArray(error.enum)) out.push(...error.enum.filter((v): v is string => typeof v === 'string'));
  for (const key of ['allOf', 'oneOf', 'anyOf']) {
    const list = s[key];
    if (Array.isArray(list)) for (const sub of list) out.push(...errorCodesOf(doc, sub, seen));
  }
  return out;
}

function errorCodeProblems(doc: Obj, registry: Record<string, { status: number }>): string[] {
  const problems: string[] = [];
  const codeSchema = resolve(doc, asObj(asObj(doc.components).schemas).ErrorCode);
  const enumCodes = Array.isArray(codeSchema.enum) ? codeSchema.enum : [];
  const enumSet = new Set(enumCodes);
  const codes = Object.keys(registry);
  for (const code of setDiff(codes, enumSet)) problems.push(`${code} is in ERRORS but not in the ErrorCode enum`);
  for (const code of setDiff(enumSet, new Set<unknown>(codes))) problems.push(`the ErrorCode enum has ${String(code)}, which ERRORS lacks`);
  if (enumSet.size !== enumCodes.length) problems.push('the ErrorCode enum repeats a code');

  const carried = new Set<string>(); // `code status`
  for (const { path, method, op } of operations(doc)) {
    for (const [status, rawResponse] of Object.entries(asObj(op.responses))) {
      const response = resolve(doc, rawResponse);
      for (const media of Object.values(asObj(response.content))) {
        for (const code of errorCodesOf(doc, asObj(media).schema)) {
          const where = `${method.toUpperCase()} ${path} ${status}`;
          const entry = registry[code];
          if (!/^\d{3}$/.test(status)) problems.push(`${where} carries ${code} under a non-specific status`);
          else if (entry === undefined) problems.push(`${where} carries ${code}, which ERRORS lacks`);
          else if (entry.status !== Number(status)) problems.push(`${where} carries ${code}, whose status is ${entry.status}`);
          else carried.add(`${code} ${status}`);
        }
      }
    }
  }
  for (const [code, { status }] of Object.entries(registry)) {
    if (!carried.has(`${code} ${status}`)) problems.push(`${code} (${status}) is in no path response with status ${status}`);
  }
  return problems;
}

// --- (e) references and path parameters ----------------------------------------------------------

function refProblems(doc: Obj): string[] {
  const problems: string[] = [];
  let count = 0;
  const walk = (node: unknown, at: string): void => {
    if (Array.isArray(node)) {
      node.forEach((item, i) => walk(item, `${at}/${i}`));
      return;
    }
    if (!isObj(node)) return;
    if ('$ref' in node) {
      count++;
      const ref = node.$ref;
      if (typeof ref !== 'string' || pointer(doc, ref) === undefined) problems.push(`${at}: $ref ${JSON.stringify(ref)} does not resolve`);
    }
    for (const [key, value] of Object.entries(node)) {
      // `example(s)` hold data, not schema: a `$ref` key there is no reference.
      if (key !== 'example' && key !== 'examples') walk(value, `${at}/${key}`);
    }
  };
  walk(doc, '#');
  if (count === 0) problems.push('the document has no $ref at all');
  return problems;
}

function pathParameterProblems(doc: Obj): string[] {
  const problems: string[] = [];
  for (const { path, method, item, op } of operations(doc)) {
    const where = `${method.toUpperCase()} ${path}`;
    const inTemplate = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);
    const declared = new Map<string, Obj>();
    for (const list of [item.parameters, op.parameters]) {
      if (!Array.isArray(list)) continue;
      for (const raw of list) {
        const p = resolve(doc, raw);
        if (p.in === 'path' && typeof p.name === 'string') declared.set(p.name, p);
      }
    }
    for (const name of inTemplate) {
      const p = declared.get(name);
      if (p === undefined) problems.push(`${where}: {${name}} has no path parameter`);
      else if (p.required !== true) problems.push(`${where}: path parameter ${name} is not required: true`);
    }
    for (const name of setDiff(declared.keys(), new Set(inTemplate))) problems.push(`${where}: path parameter ${name} is not in the path`);
  }
  return problems;
}

// --- the tests ---------------------------------------------------------------------------------

const ROUTES: readonly RouteRow[] = ROUTE_TABLE;

/** A deep copy of the document to break. */
function copy(): Obj {
  return structuredClone(DOC);
}

/** The object at `keys` inside `doc`; throws (failing the test) when it is missing. */
function at(doc: Obj, ...keys: string[]): Obj {
  let node: unknown = doc;
  for (const key of keys) {
    if (!isObj(node) || !isObj(node[key])) throw new Error(`the document has no ${keys.join(' > ')}`);
    node = node[key];
  }
  return node as Obj;
}

t.test('the document is OpenAPI 3.1.0 and carries the package version', async (t) => {
  t.same(versionProblems(DOC, PACKAGE_VERSION), []);
});

t.test('the version check catches another OpenAPI version and a stale info.version', async (t) => {
  const old = copy();
  old.openapi = '3.0.3';
  t.match(versionProblems(old, PACKAGE_VERSION), [/openapi is "3.0.3"/]);
  t.match(versionProblems(DOC, '99.0.0'), [/info.version is .* but package.json has 99.0.0/]);
});

t.test('every ROUTE_TABLE route is in the document and every admin operation of the document is in ROUTE_TABLE', async (t) => {
  t.ok(ROUTES.length > 0, 'the route table is not empty');
  t.same(routeProblems(DOC, ROUTES), []);
});

t.test('the route check catches a missing operation, an invented one and a route the document lacks', async (t) => {
  const missing = copy();
  delete at(missing, 'paths', '/credentials/{credential_id}').delete;
  t.match(routeProblems(missing, ROUTES), [/DELETE \/credentials\/\{\} is in ROUTE_TABLE but not in the document/]);
  const invented = copy();
  at(invented, 'paths', '/agents/{agent_id}').patch = { responses: {} };
  t.match(routeProblems(invented, ROUTES), [/the document has PATCH \/agents\/\{\}, which ROUTE_TABLE lacks/]);
  const inventedPath = copy();
  at(inventedPath, 'paths')['/agents/{agent_id}/keys'] = { get: { responses: {} } };
  t.match(routeProblems(inventedPath, ROUTES), [/the document has GET \/agents\/\{\}\/keys/]);
  t.match(routeProblems(DOC, [...ROUTES, { method: 'GET', pattern: '/agents/:id/keys', auth: true }]), [/GET \/agents\/\{\}\/keys is in ROUTE_TABLE/]);
  t.match(routeProblems({ ...DOC, paths: {} }, ROUTES), ['the document has no admin operation']);
});

t.test('route normalisation: `:id` and `{name}` meet; listener paths and the proxy are not admin routes', async (t) => {
  t.equal(routeKey('get', '/agents/{agent_id}/proxy-url'), routeKey('GET', '/agents/:id/proxy-url'));
  t.equal(routeKey('DELETE', '/credentials/:id/'), 'DELETE /credentials/{}');
  for (const path of LISTENER_PATHS) t.notOk(isAdminPath(path), path);
  t.notOk(isAdminPath('/proxy/{agent_api_key}/{target}'));
  t.ok(isAdminPath('/audit'));
  t.ok(Object.keys(at(DOC, 'paths')).some((p) => p.startsWith(PROXY_PREFIX)), 'the proxy route is documented');
  for (const path of LISTENER_PATHS) t.ok(isObj(at(DOC, 'paths', path).get), `GET ${path} is documented`);
});

t.test('routes with auth: true require bearerAuth, the others no security', async (t) => {
  t.same(securityProblems(DOC, ROUTES), []);
});

t.test('the security check catches a missing requirement, an extra one, a global one and a changed scheme', async (t) => {
  const open = copy();
  delete at(open, 'paths', '/agents', 'get').security;
  t.match(securityProblems(open, ROUTES), [/GET \/agents has security \[\] but ROUTE_TABLE says auth: true/]);
  const closed = copy();
  at(closed, 'paths', '/auth/login', 'post').security = [{ bearerAuth: [] }];
  t.match(securityProblems(closed, ROUTES), [/POST \/auth\/login has security .* but ROUTE_TABLE says auth: false/]);
  const global = copy();
  global.security = [{ bearerAuth: [] }];
  t.match(securityProblems(global, ROUTES), [/POST \/auth\/signup has security/, /POST \/auth\/login has security/]);
  const scheme = copy();
  at(scheme, 'components', 'securitySchemes').bearerAuth = { type: 'apiKey', in: 'header', name: 'X-Token' };
  t.match(securityProblems(scheme, ROUTES), [/bearerAuth is not an http bearer scheme/]);
});

t.test('the ErrorCode enum is exactly ERRORS, and every code is in a path response of its status', async (t) => {
  t.same(errorCodeProblems(DOC, ERRORS), []);
});

t.test('the error-code check catches a missing, an unknown, an unused and a misplaced code', async (t) => {
  const enumOf = (doc: Obj): unknown[] => at(doc, 'components', 'schemas', 'ErrorCode').enum as unknown[];
  const missing = copy();
  at(missing, 'components', 'schemas', 'ErrorCode').enum = enumOf(missing).filter((c) => c !== 'conflict');
  t.match(errorCodeProblems(missing, ERRORS), [/conflict is in ERRORS but not in the ErrorCode enum/]);
  const extra = copy();
  enumOf(extra).push('teapot');
  t.match(errorCodeProblems(extra, ERRORS), [/the ErrorCode enum has teapot/]);
  t.match(errorCodeProblems(DOC, { ...ERRORS, teapot: { status: 418 } }), [/teapot is in ERRORS but not in the ErrorCode enum/, /teapot \(418\) is in no path response/]);
  // No path answers 409 any more: conflict is in the enum but in no response.
  const unused = copy();
  delete at(unused, 'paths', '/auth/signup', 'post', 'responses')['409'];
  delete at(unused, 'paths', '/credentials', 'post', 'responses')['409'];
  delete at(unused, 'paths', '/agents', 'post', 'responses')['409'];
  delete at(unused, 'paths', '/approvals/{approval_id}/approve', 'post', 'responses')['409'];
  delete at(unused, 'paths', '/approvals/{approval_id}/deny', 'post', 'responses')['409'];
  t.match(errorCodeProblems(unused, ERRORS), [/conflict \(409\) is in no path response with status 409/]);
  // rate_limited moved under 400: a code under the wrong status, and none left at 429.
  const misplaced = copy();
  const login = at(misplaced, 'paths', '/auth/login', 'post', 'responses');
  login['400'] = login['429'];
  delete login['429'];
  // The proxy's 429 (rate limits) carries it too, the audit stream's (streams of one organization), the heavy jobs' (jobs of one organization waiting), large policies' (readings waiting) and signup's.
  for (const op of Object.values(at(misplaced, 'paths', '/proxy/{agent_api_key}/{target}') as Record<string, any>)) {
    if (op?.responses) delete op.responses['429'];
  }
  delete at(misplaced, 'paths', '/audit/stream', 'get', 'responses')['429'];
  delete at(misplaced, 'paths', '/policy/replay', 'post', 'responses')['429'];
  delete at(misplaced, 'paths', '/policy/check', 'post', 'responses')['429'];
  delete at(misplaced, 'paths', '/agents/{agent_id}/policy', 'post', 'responses')['429'];
  delete at(misplaced, 'paths', '/audit/export/pdf', 'get', 'responses')['429'];
  delete at(misplaced, 'paths', '/audit/verify', 'get', 'responses')['429'];
  delete at(misplaced, 'paths', '/auth/signup', 'post', 'responses')['429'];
  t.match(errorCodeProblems(misplaced, ERRORS), [/POST \/auth\/login 400 carries rate_limited, whose status is 429/, /rate_limited \(429\) is in no path response/]);
  // A response that names a code the registry does not have.
  const unknown = copy();
  at(unknown, 'paths', '/agents', 'get', 'responses')['418'] = {
    description: 'x',
    content: { 'application/json': { schema: { properties: { error: { const: 'teapot' } } } } },
  };
  t.match(errorCodeProblems(unknown, ERRORS), [/GET \/agents 418 carries teapot, which ERRORS lacks/]);
});

t.test('errorCodesOf reads const and enum through $ref, allOf and oneOf, and not the base enum', async (t) => {
  const responses = at(DOC, 'components', 'responses');
  const schemaOf = (name: string): unknown => asObj(asObj(asObj(responses[name]).content)['application/json']).schema;
  t.same(errorCodesOf(DOC, schemaOf('NotFound')), ['not_found']);
  t.same(errorCodesOf(DOC, schemaOf('ProxyForbidden')).sort(), ['policy_denied', 'target_forbidden']);
  t.same(errorCodesOf(DOC, { $ref: '#/components/schemas/Error' }), []);
});

t.test('every $ref resolves', async (t) => {
  t.same(refProblems(DOC), []);
});

t.test('the reference check catches a dangling and an external $ref', async (t) => {
  const dangling = copy();
  at(dangling, 'paths', '/agents', 'get', 'responses')['401'] = { $ref: '#/components/responses/Nope' };
  t.match(refProblems(dangling), [/#\/paths\/\/agents\/get\/responses\/401: \$ref "#\/components\/responses\/Nope" does not resolve/]);
  const external = copy();
  at(external, 'components', 'schemas', 'Agent', 'properties').id = { $ref: 'other.json#/Id' };
  t.match(refProblems(external), [/\$ref "other.json#\/Id" does not resolve/]);
  t.equal(pointer({ a: { 'b/c': 1 } }, '#/a/b~1c'), 1, 'JSON pointer escapes are honoured');
});

t.test('every {name} of a path template is a required path parameter, and no other path parameter is declared', async (t) => {
  t.same(pathParameterProblems(DOC), []);
});

t.test('the path-parameter check catches a missing, an optional and a stray parameter', async (t) => {
  const missing = copy();
  at(missing, 'paths', '/credentials/{credential_id}', 'delete').parameters = [];
  t.match(pathParameterProblems(missing), [/DELETE \/credentials\/\{credential_id\}: \{credential_id\} has no path parameter/]);
  const optional = copy();
  at(optional, 'components', 'parameters', 'CredentialId').required = false;
  t.match(pathParameterProblems(optional), [/path parameter credential_id is not required: true/]);
  const stray = copy();
  at(stray, 'paths', '/agents', 'get').parameters = [{ name: 'agent_id', in: 'path', required: true, schema: { type: 'string' } }];
  t.match(pathParameterProblems(stray), [/GET \/agents: path parameter agent_id is not in the path/]);
});

// Credentials: create (value sealed with AES-256-GCM), list (never the value), delete.
import { GuardError } from '../shared/errors.js';
import { credentialAssociatedData, sealValue } from '../shared/secrets.js';
import { CRED_TYPES, type Credential } from '../shared/types.js';
import type { AdminContext, Handler } from './context.js';
import { enumField, isUuid, json, noContent, readJsonObject, stringField } from './http.js';

export const CREDENTIAL_VALUE_MAX = 8192;

// RFC 9110 §5.6.2 token characters.
const HEADER_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
// Headers the proxy owns: injecting one of these would break framing or routing.
const FORBIDDEN_HEADERS = new Set([
  'host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer',
  'proxy-connection', 'proxy-authorization', 'proxy-authenticate', 'x-agent-reasoning', 'x-agent-task-id',
]);

export function credentialJson(c: Credential) {
  return {
    id: c.id,
    name: c.name,
    hostname: c.hostname,
    cred_type: c.credType,
    ...(c.headerName !== null ? { header_name: c.headerName } : {}),
    ...(c.queryParam !== null ? { query_param: c.queryParam } : {}),
    created_at: c.createdAt,
  };
}

/**
 * A credential hostname: lower-cased host with an optional `:port`, normalised by
 * the WHATWG URL parser (`:443` is dropped since it is the default). Null when it
 * is anything else (a scheme, a path, userinfo, a bad port).
 */
export function normalizeCredentialHostname(raw: string): string | null {
  const input = raw.trim().toLowerCase().replace(/\.(?=(:\d+)?$)/, '');
  if (input.length === 0 || input.length > 260 || /[/?#@\\\s%]/.test(input)) return null;
  let url: URL;
  try {
    url = new URL(`https://${input}/`);
  } catch {
    return null;
  }
  if (url.hostname.length === 0) return null;
  const expected = input.endsWith(':443') ? input.slice(0, -4) : input;
  return url.host === expected ? url.host : null;
}

export function credentialHandlers(ctx: AdminContext) {
  const create: Handler = async (req, caller) => {
    const body = readJsonObject(req);
    const name = stringField(body, 'name', { min: 1, max: 128 });
    const hostname = normalizeCredentialHostname(stringField(body, 'hostname', { min: 1, max: 260 }));
    if (hostname === null) {
      throw new GuardError('invalid_request', "Field 'hostname' must be a host name with an optional :port (no scheme or path).", { field: 'hostname' });
    }
    const credType = enumField(body, 'cred_type', CRED_TYPES);
    const value = stringField(body, 'value', { min: 1, max: CREDENTIAL_VALUE_MAX });
    if (credType !== 'query' && /[\0\r\n]/.test(value)) {
      throw new GuardError('invalid_request', "Field 'value' must not contain CR, LF or NUL characters.", { field: 'value' });
    }
    let headerName: string | null = null;
    let queryParam: string | null = null;
    if (credType === 'header') {
      headerName = (stringField(body, 'header_name', { optional: true, min: 1, max: 128 }) ?? name).toLowerCase();
      const field = body.header_name === undefined ? 'name' : 'header_name';
      if (!HEADER_TOKEN.test(headerName) || FORBIDDEN_HEADERS.has(headerName)) {
        throw new GuardError('invalid_request', `Field '${field}' must be a valid HTTP header name the proxy does not own.`, { field });
      }
    } else if (credType === 'query') {
      queryParam = stringField(body, 'query_param', { optional: true, min: 1, max: 128 }) ?? name;
    }
    const credential = await ctx.store.createCredential({
      orgId: caller.orgId,
      name,
      hostname,
      credType,
      headerName,
      queryParam,
      sealedValue: sealValue(ctx.secrets.encryptionKey, value, credentialAssociatedData(caller.orgId, hostname)),
    });
    return json(201, credentialJson(credential));
  };

  const list: Handler = async (_req, caller) => json(200, (await ctx.store.listCredentials(caller.orgId)).map(credentialJson));

  const remove: Handler = async (_req, caller, params) => {
    const id = params.id ?? '';
    if (!isUuid(id) || !(await ctx.store.deleteCredential(caller.orgId, id.toLowerCase()))) {
      throw new GuardError('not_found', 'No credential with that id.');
    }
    return noContent();
  };

  return { create, list, remove };
}

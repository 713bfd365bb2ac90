// Credentials: create (value sealed with AES-256-GCM), list (never the value), delete.
import { GuardError } from '../shared/errors.js';
import { CREDENTIAL_FORBIDDEN_HEADERS, isUuid } from '../shared/http.js';
import { credentialAssociatedData, sealValue } from '../shared/secrets.js';
import { normalizeCredentialHostname } from '../shared/target.js';
import { CRED_TYPES, type Credential } from '../shared/types.js';
import type { AdminContext, Handler } from './context.js';
import { enumField, json, noContent, readJsonObject, stringField } from './http.js';

export const CREDENTIAL_VALUE_MAX = 8192;

// RFC 9110 §5.6.2 token characters.
const HEADER_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

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

/** What a bearer or header credential's value may hold. */
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;

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
    // A header value goes out as bytes: undici refuses control characters (every
    // call to the host would fail, blamed on the agent) and writes U+0080-U+00FF
    // as one Latin-1 byte each (the tool would get another secret than the one
    // typed). So a bearer or header value is printable ASCII, space and tab.
    if (credType !== 'query' && !HEADER_VALUE.test(value)) {
      throw new GuardError('invalid_request', "Field 'value' must be printable ASCII (spaces and tabs allowed): no control or non-ASCII characters for a header credential.", { field: 'value' });
    }
    // The upstream drops a header value's outer spaces and tabs (a pasted value's
    // trailing space works, then echoes back without it, past the audit's redaction).
    if (credType !== 'query' && /^[ \t]|[ \t]$/.test(value)) {
      throw new GuardError('invalid_request', "Field 'value' must not begin or end with a space or tab for a header credential.", { field: 'value' });
    }
    let headerName: string | null = null;
    let queryParam: string | null = null;
    if (credType === 'header') {
      // Kept as written (`X-Api-Key` stays `X-Api-Key`); compared without case.
      headerName = stringField(body, 'header_name', { optional: true, min: 1, max: 128 }) ?? name;
      const field = body.header_name === undefined || body.header_name === null ? 'name' : 'header_name'; // null is absent (docs/api.md)
      if (!HEADER_TOKEN.test(headerName) || CREDENTIAL_FORBIDDEN_HEADERS.has(headerName.toLowerCase())) {
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

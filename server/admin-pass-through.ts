// Split mode: a proxy process passes every admin path to the admin process
// (ADMIN_URL) over a keep-alive pool, adding X-Forwarded-For so the admin's login
// limiter sees the client's address.
import { Pool } from 'undici';
import type { AdminRequest, AdminResponse } from '../admin/http.js';
import { errorBody } from '../shared/errors.js';
import { PASS_THROUGH_DROP as DROP } from '../shared/http.js';

export function createAdminPassThrough(adminUrl: string): { handle(req: AdminRequest): Promise<AdminResponse>; close(): Promise<void> } {
  const pool = new Pool(adminUrl, { connections: 64, headersTimeout: 60_000, bodyTimeout: 60_000 });
  return {
    async handle(req) {
      const headers: Record<string, string> = {};
      for (const name in req.headers) if (!DROP.has(name)) headers[name] = req.headers[name]!;
      headers['x-forwarded-for'] = req.remoteAddress;
      const query = req.query.toString();
      try {
        const res = await pool.request({
          method: req.method as 'GET',
          path: query.length > 0 ? `${req.path}?${query}` : req.path,
          headers,
          body: req.body.length > 0 ? req.body : null,
        });
        const out: Record<string, string> = {};
        for (const [name, value] of Object.entries(res.headers)) {
          if (!DROP.has(name) && name !== 'date' && value !== undefined) out[name] = Array.isArray(value) ? value.join(', ') : value;
        }
        return { status: res.statusCode, headers: out, body: Buffer.from(await res.body.arrayBuffer()) };
      } catch {
        return { status: 503, headers: { 'content-type': 'application/json' }, body: errorBody('unavailable', 'The admin service cannot be reached; retry later.') };
      }
    },
    close: () => pool.close(),
  };
}

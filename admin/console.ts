// GET /console and /console/*: the operator console's static files (built by
// `npm run build` into dist/console/, scripts/build-console.ts), read once at
// start into memory. No auth for the files themselves: the app logs in through
// POST /auth/login and calls the admin API with the token, as curl does.
//
// Every answer carries a strict Content-Security-Policy (no inline script or
// style, nothing from another origin, no framing) with X-Frame-Options for old
// browsers. The page runs only its own script and style: they carry a nonce
// made for each load, which its CSP names. 'self' would not do: /proxy/* is
// this origin too, and serves whatever a tool answers, so a script an agent
// hosts anywhere would be 'self' to the console. Assets named by their content
// hash are immutable for a year; the index is not stored (its nonce is new each
// load), so a new build is picked up at once.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GuardError } from '../shared/errors.js';
import type { AdminRequest, AdminResponse } from './http.js';

export const CONSOLE_PREFIX = '/console';

/** The CSP of every console answer but the page itself: nothing runs or styles there. */
export const CONSOLE_CSP = "default-src 'none'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/** The page's script and stylesheet elements as console/index.html writes them: each gets the nonce. */
const SCRIPT_ELEMENT = '<script type="module" src=';
const STYLESHEET_ELEMENT = '<link rel="stylesheet" href=';

/** The page's CSP: its script and stylesheet, named by the load's nonce, and the admin API ('self'). */
function pageCsp(nonce: string): string {
  return `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'`;
}

/** Sent with every console answer, the index and the assets alike. */
export const CONSOLE_SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': CONSOLE_CSP,
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
};

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
  '.map': 'application/json',
};

/** A hashed name, as the build writes it: `app-3F2A9C1B.js`. */
const HASHED = /-[A-Z0-9]{8}\.[a-z]+$/;

interface ConsoleFile {
  body: Buffer;
  type: string;
  etag: string;
  cacheControl: string;
}

export interface ConsoleFiles {
  /** Null when the path is not under /console. */
  serve(req: AdminRequest): AdminResponse | null;
}

/** dist/console from the source tree (admin/ → ../dist/console) or from the build (dist/admin/ → ../console). */
export function findConsoleDir(): string | null {
  for (const up of ['../dist/console/', '../console/']) {
    const dir = fileURLToPath(new URL(up, import.meta.url));
    if (existsSync(join(dir, 'index.html'))) return dir;
  }
  return null;
}

export function loadConsole(dir: string | null = findConsoleDir()): ConsoleFiles {
  const files = new Map<string, ConsoleFile>();
  if (dir !== null) {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (!statSync(path).isFile()) continue;
      const body = readFileSync(path);
      files.set(name, {
        body,
        type: TYPES[extname(name)] ?? 'application/octet-stream',
        etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
        cacheControl: HASHED.test(name) ? 'public, max-age=31536000, immutable' : 'no-cache',
      });
    }
  }
  const index = files.get('index.html') ?? null;
  // The page, whose own script and stylesheet elements (console/index.html) are given each load's nonce.
  const page = index?.body.toString('utf8');
  // Each once, as the build writes them; else the page would be served with a CSP refusing its own script (a blank console).
  for (const element of [SCRIPT_ELEMENT, STYLESHEET_ELEMENT]) {
    if (page !== undefined && page.split(element).length !== 2) throw new Error(`console: ${dir}index.html must hold '${element}' once (the element given each load's CSP nonce); rebuild with npm run build`);
  }

  return {
    serve(req) {
      const { path } = req;
      if (path !== CONSOLE_PREFIX && !path.startsWith(`${CONSOLE_PREFIX}/`)) return null;
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        throw new GuardError('method_not_allowed', undefined, undefined, { ...CONSOLE_SECURITY_HEADERS, allow: 'GET, HEAD' });
      }
      // Errors under /console carry the console's security headers too (docs/api.md: every answer).
      if (index === null) throw new GuardError('not_found', 'The console is not built: run `npm run build`.', undefined, CONSOLE_SECURITY_HEADERS);
      const name = path.slice(CONSOLE_PREFIX.length + 1);
      const found = name.includes('/') ? undefined : files.get(name);
      // An asset that is not there (a stale page asking for an old build's file) is
      // 404, not the index served as script; any other path is the app's (hash
      // routing keeps real ones at /console/), so the index answers it.
      if (found === undefined && /\.(js|css|map|png|svg|ico)$/.test(name)) throw new GuardError('not_found', 'No such console file.', undefined, CONSOLE_SECURITY_HEADERS);
      if (found === undefined || found === index) {
        const nonce = randomBytes(16).toString('base64');
        const body = page!.replace(SCRIPT_ELEMENT, `<script nonce="${nonce}" ${SCRIPT_ELEMENT.slice(8)}`).replace(STYLESHEET_ELEMENT, `<link nonce="${nonce}" ${STYLESHEET_ELEMENT.slice(6)}`);
        return {
          status: 200,
          headers: { ...CONSOLE_SECURITY_HEADERS, 'content-security-policy': pageCsp(nonce), 'content-type': index.type, 'cache-control': 'no-store' },
          body,
        };
      }
      const file = found;
      const headers: Record<string, string> = {
        ...CONSOLE_SECURITY_HEADERS,
        'content-type': file.type,
        'cache-control': file.cacheControl,
        etag: file.etag,
      };
      if (req.headers['if-none-match'] === file.etag) return { status: 304, headers, body: '' };
      return { status: 200, headers, body: file.body };
    },
  };
}

// undici's Pool, and the request API on it, without undici's index. The index
// loads every part of undici at once (fetch, WebSocket, EventSource, its caches,
// proxy agents, mocks): ~21 MiB of RSS in an empty process against ~12 for the
// pool and the API, and ~5 MiB of a split proxy's at rest (docs/performance.md,
// "undici's parts, not its index"). These are the files the index itself
// requires; test/unit/undici.test.ts checks that they are the index's classes.
import { createRequire } from 'node:module';
import type * as Undici from 'undici';

const require = createRequire(import.meta.url);

export const Pool = require('undici/lib/dispatcher/pool.js') as typeof Undici.Pool;
export type Pool = Undici.Pool;

// request(), stream() and the rest on every dispatcher, as the index assigns them.
const Dispatcher = require('undici/lib/dispatcher/dispatcher.js') as { prototype: object };
Object.assign(Dispatcher.prototype, require('undici/lib/api/index.js') as object);

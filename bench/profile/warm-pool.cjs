// An experiment, not a part of the guard: a module to preload into a Node
// process that forwards with undici's Pool (`node -r
// ./bench/profile/warm-pool.cjs dist/server/main.js`; the bare forwarder too).
// undici's Pool gives a call the first free connection in the order they were
// opened, so at a steady moderate rate the first few stay busy and the rest
// idle out (4 s); the next burst opens them again, ~1.3 ms of the loop each.
// With this module a call goes to the next free connection round the pool
// among those used in the last WARM_POOL_MS (default 2000), so every
// connection a burst opened stays open while the rate keeps them all in use
// (2,000 calls a second over 64 connections: each used every 32 ms); a free
// connection idle for longer, then a closed one, then a new one come after.
// At exit it writes to stderr how many connections its pools created.
// It reaches into undici's internals (7.x), which is why it stays here.
// docs/performance.md, "The fixed-rate tail, taken apart", was measured with it.
'use strict';
const Pool = require('undici/lib/dispatcher/pool.js');
const { kClients, kNeedDrain, kGetDispatcher, kAddClient } = require('undici/lib/dispatcher/pool-base.js');
const { kConnected } = require('undici/lib/core/symbols.js');

const warmMs = Number(process.env.WARM_POOL_MS ?? 2000);
const probe = new Pool('http://127.0.0.1:1');
const own = (name) => {
  const symbol = Object.getOwnPropertySymbols(probe).find((s) => s.description === name);
  if (symbol === undefined) throw new Error(`warm-pool: undici's Pool has no ${name} symbol`);
  return symbol;
};
const kFactory = own('factory');
const kUrl = own('url');
const kOptions = own('options');
const kConnections = own('connections');
void probe.close();
const kLastUsed = Symbol('warm-pool last used');
const kCursor = Symbol('warm-pool cursor');
let opened = 0;

Pool.prototype[kGetDispatcher] = function warmDispatcher() {
  const clients = this[kClients];
  const n = clients.length;
  const now = Date.now();
  const cursor = this[kCursor] ?? 0;
  let fallback;
  for (let i = 0; i < n; i++) {
    const client = clients[(cursor + i) % n];
    if (client[kNeedDrain]) continue;
    if (client[kConnected] && now - (client[kLastUsed] ?? 0) < warmMs) {
      this[kCursor] = (cursor + i + 1) % n;
      client[kLastUsed] = now;
      return client;
    }
    if (fallback === undefined || (client[kConnected] && !fallback[kConnected])) fallback = client;
  }
  if (fallback !== undefined) {
    fallback[kLastUsed] = now;
    return fallback;
  }
  if (!this[kConnections] || n < this[kConnections]) {
    const client = this[kFactory](this[kUrl], this[kOptions]);
    this[kAddClient](client);
    client[kLastUsed] = now;
    opened++;
    return client;
  }
  return undefined;
};

process.on('exit', () => process.stderr.write(`warm-pool: ${opened} connections created\n`));

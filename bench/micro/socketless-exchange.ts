// A real ProxyExchange with no uWS response behind it, for the benchmarks of
// what the exchange does before it answers (copying the head, resolving the
// agent on a warm cache, hashing the output): none of that touches `res`, and
// this one throws if anything does, so a benchmark cannot pass by measuring a
// stand-in's answer.
import type { HttpResponse } from 'uWebSockets.js';
import { ProxyExchange } from '../../proxy/exchange.js';

const NO_RESPONSE = new Proxy({}, {
  get(_target, name) {
    throw new Error(`a benchmark's exchange has no uWS response, yet res.${String(name)} was read`);
  },
}) as HttpResponse;

export function socketlessExchange(): ProxyExchange {
  return new ProxyExchange(NO_RESPONSE);
}

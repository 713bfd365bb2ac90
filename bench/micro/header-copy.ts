// The copy of a request head out of uWS (server/request-head.ts
// readRequestHead) into the call's ProxyExchange, which keeps the headers to
// forward and reads the agent's annotations (exchange.ts `header`,
// `dropConnectionFields`). `node dist/bench/micro/header-copy.js`.
import type { HttpRequest } from 'uWebSockets.js';
import { readRequestHead } from '../../server/request-head.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';
import { socketlessExchange } from './socketless-exchange.js';

const PROXY_URL = '/proxy/agk_0123456789ABCDEFGHIJabcdefghij0123456789/api.github.com/repos/acme/widgets/issues';

/** An agent's POST as Python's httpx sends it (requests and Node's fetch send the same Connection: keep-alive). */
const AGENT_HEAD: readonly (readonly [string, string])[] = [
  ['host', 'guard.internal:8080'],
  ['user-agent', 'python-httpx/0.27.2'],
  ['accept', 'application/json'],
  ['accept-encoding', 'gzip, deflate'],
  ['connection', 'keep-alive'],
  ['content-type', 'application/json'],
  ['content-length', '342'],
  ['x-agent-reasoning', 'The user asked to file the crash they pasted; no open issue has its stack trace.'],
  ['x-agent-task-id', 'task-7f3a9c'],
];

/**
 * Stands in for uWS's HttpRequest with the three methods readRequestHead calls.
 * Its forEach hands over strings that already exist: uWS's own cost of making
 * them from its buffer is not in these numbers.
 */
function uwsRequest(method: string, query: string, head: readonly (readonly [string, string])[]): HttpRequest {
  const names = head.map(([name]) => name);
  const values = head.map(([, value]) => value);
  return {
    getCaseSensitiveMethod: () => method,
    getQuery: () => query,
    forEach(cb: (name: string, value: string) => void) {
      for (let i = 0; i < names.length; i++) cb(names[i]!, values[i]!);
    },
  } as unknown as HttpRequest;
}

export const measureHeaderCopy: MicroCases = () => {
  const withConnection = uwsRequest('POST', 'state=open', AGENT_HEAD);
  const withoutConnection = uwsRequest('POST', 'state=open', AGENT_HEAD.filter(([name]) => name !== 'connection'));
  const ex = socketlessExchange();
  return [
    // One exchange, its forwarded headers emptied each call as a new one starts them.
    measure('readRequestHead (9 headers, Connection: keep-alive, into a ProxyExchange)', () => {
      ex.headers = [];
      readRequestHead(withConnection, PROXY_URL, ex);
      return ex.headers;
    }),
    measure('readRequestHead (the same 8 without Connection: no dropConnectionFields)', () => {
      ex.headers = [];
      readRequestHead(withoutConnection, PROXY_URL, ex);
      return ex.headers;
    }),
    // The listener makes the exchange just before it copies the head.
    measure('new ProxyExchange + readRequestHead (9 headers)', () => {
      const fresh = socketlessExchange();
      readRequestHead(withConnection, PROXY_URL, fresh);
      return fresh;
    }),
  ];
};

runWhenMain(import.meta.url, measureHeaderCopy);

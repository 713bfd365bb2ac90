// A stand-in for uWS's HttpResponse that records what a proxy stage answers, so
// a stage can be unit-tested without a socket. It implements only what the
// exchange's answer path calls (cork, writeStatus, writeHeader, end); anything
// else throws, so a stage that starts touching more of the response fails here
// loudly instead of passing silently.
import type { HttpResponse } from 'uWebSockets.js';
import { ProxyExchange } from '../../proxy/exchange.js';

export interface RecordedAnswer {
  status: string;
  headers: Record<string, string>;
  body: string;
  closeConnection: boolean;
}

export function recordedResponse(): { res: HttpResponse; answer: () => RecordedAnswer | null } {
  let answer: RecordedAnswer | null = null;
  const pending: RecordedAnswer = { status: '', headers: {}, body: '', closeConnection: false };
  const res = {
    cork(fn: () => void) {
      fn();
      return res;
    },
    writeStatus(status: string) {
      pending.status = status;
      return res;
    },
    writeHeader(name: string, value: string) {
      pending.headers[name] = value;
      return res;
    },
    end(body: string, closeConnection = false) {
      pending.body = String(body);
      pending.closeConnection = closeConnection;
      answer = { ...pending };
      return res;
    },
  };
  const guarded = new Proxy(res, {
    get(target, name) {
      if (name in target) return target[name as keyof typeof target];
      throw new Error(`recordedResponse: the stage called res.${String(name)}, which this stand-in does not record`);
    },
  });
  return { res: guarded as unknown as HttpResponse, answer: () => answer };
}

/** A fresh exchange over a recorded response, with `fields` set as the head reader would. */
export function exchange(fields: Partial<Pick<ProxyExchange, 'method' | 'rawTarget' | 'query' | 'headError'>> = {}): { ex: ProxyExchange; answer: () => RecordedAnswer | null } {
  const { res, answer } = recordedResponse();
  const ex = new ProxyExchange(res);
  ex.method = 'GET';
  Object.assign(ex, fields);
  return { ex, answer };
}

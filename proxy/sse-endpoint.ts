// The older MCP transport (HTTP+SSE, protocol 2024-11-05) opens with an event
//   event: endpoint
//   data: /messages?sessionId=…
// whose data is an absolute path the client resolves against the stream's URL:
// through the guard that lands outside /proxy/{key}/{host}/, so every POST is 404.
// This rewrites that one event's data to the same path under the agent's proxy
// prefix. It looks only at the start of an event stream: until its first
// complete event, or 4 KiB; every other byte passes untouched.
import { redactCapture } from './exchange.js';

const MAX_SCAN_BYTES = 4096;
const EVENT_END = /\r\n\r\n|\n\n|\r\r/;

export class SseEndpointRewriter {
  readonly #prefix: string;
  /** An injected credential's spellings, kept out of the endpoint's URL as out of a Location (redactCapture). */
  readonly #secrets: readonly Buffer[];
  #held = '';
  #done = false;

  constructor(prefix: string, secrets: readonly Buffer[] = []) {
    this.#prefix = prefix;
    this.#secrets = secrets;
  }

  /** The bytes to send now for this chunk (maybe none yet: held until its event is complete). */
  feed(chunk: Buffer): Buffer {
    if (this.#done) return chunk;
    // latin1: one character per byte, so the bytes go out exactly as they came.
    const text = this.#held + chunk.toString('latin1');
    const boundary = EVENT_END.exec(text);
    if (boundary === null) {
      if (text.length <= MAX_SCAN_BYTES) {
        this.#held = text;
        return EMPTY;
      }
      return this.#finish(text);
    }
    const end = boundary.index + boundary[0].length;
    const event = text.slice(0, boundary.index);
    if (/(?:^|[\r\n])event: ?endpoint(?:[\r\n]|$)/.test(event)) {
      // An endpoint built from the request's URL would hand the agent a query credential.
      const rewritten = redactCapture(Buffer.from(rewriteEndpoint(event, this.#prefix), 'latin1'), this.#secrets, false).toString('latin1');
      return this.#finish(rewritten + text.slice(boundary.index, end) + text.slice(end));
    }
    // A first event of another kind (a comment, a message): the stream is not the old transport's opening.
    return this.#finish(text);
  }

  /** The stream ended: whatever is held goes out as it came. */
  flush(): Buffer {
    return this.#finish(this.#held);
  }

  #finish(text: string): Buffer {
    this.#done = true;
    this.#held = '';
    return text.length === 0 ? EMPTY : Buffer.from(text, 'latin1');
  }
}

const EMPTY = Buffer.alloc(0);

/** The event with its `data:` line's absolute path put under `prefix`; other lines as they were. */
export function rewriteEndpoint(event: string, prefix: string): string {
  return event.replace(/(^|[\r\n])data: ?(\/(?!\/)[^\r\n]*)/, (_m, start: string, path: string) => `${start}data: ${prefix}${withoutDotSegments(path)}`);
}

/**
 * The path as the client will resolve it (WHATWG URL: dot segments, raw or
 * escaped, '\\' read as '/', tabs and newlines dropped), resolved against the
 * upstream's root first: under the prefix, `/../evil.example/m` or
 * `/..\\evil.example/m` would make the client post to /proxy/{key}/evil.example/m,
 * another tool. A fragment is the client's own and is kept.
 */
function withoutDotSegments(path: string): string {
  const url = new URL(path, 'http://upstream.invalid');
  if (url.origin !== 'http://upstream.invalid') return '/'; // another origin spelled as a path: nothing of it is kept
  return `${url.pathname}${url.search}${url.hash}`;
}

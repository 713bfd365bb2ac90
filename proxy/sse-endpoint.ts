// The older MCP transport (HTTP+SSE, protocol 2024-11-05) opens with an event
//   event: endpoint
//   data: /messages?sessionId=…
// whose data is a reference the client resolves against the stream's URL:
// through the guard an absolute path lands outside /proxy/{key}/{host}/, so
// every POST is 404, and a relative one may climb into another tool's prefix
// (`../api.github.com/x`), which the guard would call with that tool's
// credential. This rewrites that one event's data as the upstream means it,
// under the tool's root, as a Location is (response-urls.ts; a reference to
// another origin becomes the tool's root: the client must not leave the
// guard). It looks only at the start of an event stream: until its first
// complete event, or 4 KiB; every other byte passes untouched.
import { redactCapture } from './exchange.js';
import { rebaseReference } from './response-urls.js';

const MAX_SCAN_BYTES = 4096;
const EVENT_END = /\r\n\r\n|\n\n|\r\r/;

export class SseEndpointRewriter {
  /** The upstream URL of the stream, which the upstream's reference is relative to. */
  readonly #base: string;
  /** The tool's root as the client is to write it (referenceRoot). */
  readonly #root: string;
  /** An injected credential's spellings, kept out of the endpoint's URL as out of a Location (redactCapture). */
  readonly #secrets: readonly Buffer[];
  #held = '';
  #done = false;

  constructor(base: string, root: string, secrets: readonly Buffer[] = []) {
    this.#base = base;
    this.#root = root;
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
      const rewritten = redactCapture(Buffer.from(rewriteEndpoint(event, this.#base, this.#root), 'latin1'), this.#secrets, false).toString('latin1');
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

/** The event with its `data:` line's reference rebased (rebaseReference); other lines as they were. */
export function rewriteEndpoint(event: string, base: string, root: string): string {
  return event.replace(/(^|[\r\n])data: ?([^\r\n]*)/, (whole, start: string, ref: string) => {
    const rebased = rebaseReference(ref, base, root, 'root');
    return rebased === ref ? whole : `${start}data: ${rebased}`;
  });
}

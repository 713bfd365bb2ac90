// The older MCP transport (HTTP+SSE, protocol 2024-11-05) opens with an event
//   event: endpoint
//   data: /messages?sessionId=…
// whose data is a reference the client resolves against the stream's URL:
// through the guard an absolute path lands outside /proxy/{key}/{host}/, so
// every POST is 404, and a relative one may climb into another tool's prefix
// (`../api.github.com/x`), which the guard would call with that tool's
// credential. This rewrites each such event's data as the upstream means it,
// under the tool's root, as a Location is (response-urls.ts; a reference to
// another origin becomes the tool's root: the client must not leave the guard).
//
// An upstream picks where and how the event comes, and MCP clients take every
// `endpoint` event, not only the first, so the whole stream is read as an
// event-stream parser reads it (WHATWG HTML §9.2.6): lines ending in CRLF, LF
// or CR, a BOM at the start, the event's type its last `event` field, its data
// every `data` line joined. Each event is held until its blank line (a client
// acts on none before it), up to MAX_EVENT_BYTES; a longer one passes as it
// comes, minus any `event: endpoint` line, so that it cannot become an
// endpoint the guard did not rewrite. Comments and other events pass as they
// came, byte for byte.
import { redactCapture } from './exchange.js';
import { rebaseReference } from './response-urls.js';

/** An event longer than this passes unheld (no endpoint event is near it). */
export const MAX_EVENT_BYTES = 64 * 1024;
/** While an event passes unheld, this much of each line is kept: enough to read `event: endpoint`. */
const LINE_HEAD = 32;
/** A UTF-8 byte order mark read as Latin-1: a client drops it before the first field. */
const BOM = '\u00ef\u00bb\u00bf';
const EMPTY = Buffer.alloc(0);

export class SseEndpointRewriter {
  /** The upstream URL of the stream, which the upstream's reference is relative to. */
  readonly #base: string;
  /** The tool's root at the guard, `/proxy/{key}/{authority}/` (ProxyExchange.referenceRoot). */
  readonly #root: string;
  /** An injected credential's spellings, kept out of the endpoint's URL as out of a Location (redactCapture). */
  readonly #secrets: readonly Buffer[];
  /** The current event's complete lines, raw (their ends included), while it is held. */
  #lines: string[] = [];
  #heldBytes = 0;
  /** The current line so far, raw: the whole of it while its event is held; while it passes, up to LINE_HEAD characters before it flows. */
  #line = '';
  /** The current event outgrew MAX_EVENT_BYTES: its lines pass as they come. */
  #passing = false;
  /** Passing: the current line is past LINE_HEAD and flows as it comes. */
  #flowing = false;
  /** The line before ended in CR and went nowhere (a dropped `event: endpoint`): an LF first in the next chunk goes nowhere too. */
  #dropped = false;
  /** The last chunk ended in CR: an LF first in the next one ends the same line. */
  #afterCr = false;
  /** No line has ended yet: the first may start with a BOM. */
  #first = true;

  constructor(base: string, root: string, secrets: readonly Buffer[] = []) {
    this.#base = base;
    this.#root = root;
    this.#secrets = secrets;
  }

  /** The bytes to send now for this chunk (maybe none yet: an event is held until it is complete). */
  feed(chunk: Buffer): Buffer {
    const text = chunk.toString('latin1');
    let out = '';
    let start = 0;
    if (this.#afterCr) {
      this.#afterCr = false;
      if (text.charCodeAt(0) === 10) {
        // The LF of a CRLF whose CR ended the line before: it goes where that line went.
        if (this.#lines.length > 0) {
          this.#lines[this.#lines.length - 1] += '\n';
          this.#heldBytes++;
        } else if (!this.#dropped) {
          out += '\n';
        }
        start = 1;
      }
    }
    this.#dropped = false;
    for (let i = start; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      let end = i + 1;
      if (c === 13) {
        if (end === text.length) this.#afterCr = true;
        else if (text.charCodeAt(end) === 10) end++;
      }
      out += this.#endLine(text.slice(start, i), text.slice(i, end));
      start = end;
      i = end - 1;
    }
    if (start < text.length) out += this.#more(text.slice(start));
    return out.length === 0 ? EMPTY : Buffer.from(out, 'latin1');
  }

  /** The stream ended: whatever is held goes out (an event without its blank line is never dispatched). */
  flush(): Buffer {
    const held = this.#lines.join('') + this.#line;
    this.#lines = [];
    this.#line = '';
    this.#heldBytes = 0;
    return held.length === 0 ? EMPTY : Buffer.from(held, 'latin1');
  }

  /** Part of a line whose end has not come yet: what to send now. */
  #more(part: string): string {
    if (this.#passing) {
      if (this.#flowing) return part;
      if (this.#line.length + part.length <= LINE_HEAD) {
        this.#line += part; // it may still read `event: endpoint`
        return '';
      }
      this.#flowing = true;
      const out = this.#line + part;
      this.#line = '';
      return out;
    }
    this.#line += part;
    if (this.#heldBytes + this.#line.length <= MAX_EVENT_BYTES) return '';
    // The event outgrew the hold: what was held goes now, the rest as it comes.
    const out = this.#release() + this.#line;
    this.#line = '';
    this.#flowing = true;
    return out;
  }

  /** A line ended (`eol` its CR, LF or CRLF; `rest` its last part): what to send now. */
  #endLine(rest: string, eol: string): string {
    const first = this.#first;
    this.#first = false;
    if (this.#passing) {
      if (this.#flowing) {
        this.#flowing = false;
        return rest + eol;
      }
      const line = this.#line + rest;
      this.#line = '';
      if (line.length === 0) {
        this.#passing = false; // the blank line: the event ends
        return eol;
      }
      const field = parseField(line, first);
      if (field !== null && field.name === 'event' && field.value === 'endpoint') {
        // An endpoint event too long to hold: its type line goes nowhere, so no client takes it for one.
        this.#dropped = eol === '\r';
        return '';
      }
      return line + eol;
    }
    const line = this.#line + rest;
    this.#line = '';
    if (line.length === 0) return this.#dispatch() + eol; // the blank line: the event is complete
    // A comment between events (a server's keep-alive) goes at once: holding it would starve a client's idle timer.
    if (this.#lines.length === 0 && line.charCodeAt(first && line.startsWith(BOM) ? BOM.length : 0) === 58) return line + eol;
    if (first && line.startsWith(BOM)) this.#bomFirst = true;
    this.#lines.push(line + eol);
    this.#heldBytes += line.length + eol.length;
    if (this.#heldBytes <= MAX_EVENT_BYTES) return '';
    return this.#release();
  }

  /**
   * The held lines of an event that outgrew the hold, to pass on: without any
   * `event: endpoint` line, as later lines of it will be, since its data can no
   * longer be rewritten.
   */
  #release(): string {
    let out = '';
    for (let i = 0; i < this.#lines.length; i++) {
      const line = this.#lines[i]!;
      const field = parseField(stripEol(line), i === 0 && this.#bomFirst);
      if (field !== null && field.name === 'event' && field.value === 'endpoint') continue;
      out += line;
    }
    this.#lines = [];
    this.#heldBytes = 0;
    this.#bomFirst = false;
    this.#passing = true;
    return out;
  }

  /** The held event, complete: rewritten when it is an endpoint event. */
  #dispatch(): string {
    const lines = this.#lines;
    this.#lines = [];
    this.#heldBytes = 0;
    if (lines.length === 0) return '';
    let type = '';
    let data: string[] | null = null;
    let firstData = -1;
    for (let i = 0; i < lines.length; i++) {
      const field = parseField(stripEol(lines[i]!), i === 0 && this.#bomFirst);
      if (field === null) continue;
      if (field.name === 'event') type = field.value;
      else if (field.name === 'data') {
        (data ??= []).push(field.value);
        if (firstData === -1) firstData = i;
      }
    }
    this.#bomFirst = false;
    const event = lines.join('');
    if (type !== 'endpoint' || data === null) return event;
    // The client joins data lines with LF, and its URL parser drops LF and tabs.
    const ref = data.join('\n');
    const rebased = rebaseReference(ref, this.#base, this.#root, 'root');
    // Unchanged (an absolute URL, or nothing to resolve): as it came, its lines as they were.
    if (rebased === ref) return event;
    let rewritten = '';
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!;
      const content = stripEol(line);
      const field = parseField(content, false);
      if (field !== null && field.name === 'data') {
        if (i === firstData) rewritten += `data: ${rebased}${line.slice(content.length)}`;
        continue;
      }
      rewritten += line;
    }
    return redactCapture(Buffer.from(rewritten, 'latin1'), this.#secrets, false).toString('latin1');
  }

  /** The first held line is the stream's first, and starts with a BOM that a client drops. */
  #bomFirst = false;
}

/** The line without its end. */
function stripEol(line: string): string {
  let end = line.length;
  while (end > 0 && (line.charCodeAt(end - 1) === 10 || line.charCodeAt(end - 1) === 13)) end--;
  return line.slice(0, end);
}

/** A line's field as a client reads it: null for a comment. */
function parseField(line: string, first: boolean): { name: string; value: string } | null {
  if (first && line.startsWith(BOM)) line = line.slice(BOM.length);
  if (line.length === 0 || line.charCodeAt(0) === 58) return null;
  const colon = line.indexOf(':');
  if (colon === -1) return { name: line, value: '' };
  let value = line.slice(colon + 1);
  if (value.charCodeAt(0) === 32) value = value.slice(1);
  return { name: line.slice(0, colon), value };
}

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
// or CR, the event's type its last `event` field, its data every `data` line
// joined. Each event is held until its blank line (a client acts on none
// before it), up to MAX_EVENT_BYTES; a longer one passes as it comes, any
// `event: endpoint` line of it made a comment (`:`, its line end kept), so
// that it cannot become an endpoint the guard did not rewrite. Comments
// between events and every other event pass as they came, byte for byte.
import { redactCapture } from './exchange.js';
import { rebaseReference } from './response-urls.js';

/** An event longer than this passes unheld (no endpoint event is near it). */
export const MAX_EVENT_BYTES = 64 * 1024;
/** While an event passes unheld, this much of each line is kept: enough to read `event: endpoint`. */
const LINE_HEAD = 32;
const EMPTY = Buffer.alloc(0);

export class SseEndpointRewriter {
  /** The upstream URL of the stream, which the upstream's reference is relative to. */
  readonly #base: string;
  /** The tool's prefix at the guard, `/proxy/{key}/{authority}` (ProxyExchange.proxyPrefix). */
  readonly #prefix: string;
  /** An injected credential's spellings, kept out of the endpoint's URL as out of a Location (redactCapture). */
  readonly #secrets: readonly Buffer[];
  /** The current event's complete lines, raw (their ends included), while it is held. */
  #lines: string[] = [];
  #heldBytes = 0;
  /** The current line so far, raw: the whole of it while its event is held; while it passes, up to LINE_HEAD characters before it flows. */
  #line = '';
  /** The current event outgrew MAX_EVENT_BYTES: its lines pass as they come. */
  #passing = false;
  /** Passing: the current line is past LINE_HEAD (so no `event: endpoint`) and flows as it comes. */
  #flowing = false;
  /** The last chunk ended in CR: an LF first in the next one ends the same line. */
  #afterCr = false;
  /** A held line is `event: endpoint`: the held event may be an endpoint one (else it is not parsed at all). */
  #endpointHeld = false;

  constructor(base: string, prefix: string, secrets: readonly Buffer[] = []) {
    this.#base = base;
    this.#prefix = prefix;
    this.#secrets = secrets;
  }

  /** The bytes to send now for this chunk (maybe none yet: an event is held until it is complete). */
  feed(chunk: Buffer): Buffer {
    if (chunk.length === 0) return EMPTY;
    // The common chunk: whole events, nothing held before it, no line ending in
    // `endpoint` (so no `event: endpoint` line): it goes on as it is, searched
    // natively, no string made (bench/micro/sse-endpoint.ts).
    if (!this.#passing && !this.#afterCr && this.#line.length === 0 && this.#lines.length === 0 && endsEvents(chunk) && !hasLineEndingInEndpoint(chunk)) {
      return chunk;
    }
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
        } else {
          out += '\n';
        }
        start = 1;
      }
    }
    // Whole events none of which has an `event: endpoint` line (LF ends only)
    // go as they came, unread line by line: only what follows the chunk's last
    // blank line waits. (Without CR, such a line is one of two spellings.)
    if (!this.#passing && !this.#endpointHeld && text.indexOf('\r', start) === -1) {
      const end = text.lastIndexOf('\n\n');
      if (end >= start) {
        const events = this.#line + text.slice(start, end + 2);
        if (!hasEndpointTypeLine(events)) {
          out += (this.#lines.length > 0 ? this.#lines.join('') : '') + events;
          this.#lines = [];
          this.#heldBytes = 0;
          this.#line = '';
          start = end + 2;
        }
      }
    }
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

  /**
   * The stream ended: whatever is held goes out. An event without its blank
   * line is never dispatched by a conformant client; for one that dispatches
   * it anyway, an endpoint event is rewritten, or its type line made a comment.
   */
  flush(): Buffer {
    let out: string;
    if (this.#passing) {
      out = this.#flowing || !isEndpointType(this.#line) ? this.#line : ':';
    } else {
      if (this.#line.length > 0) this.#hold(this.#line);
      out = this.#dispatch();
    }
    this.#lines = [];
    this.#line = '';
    this.#heldBytes = 0;
    return out.length === 0 ? EMPTY : Buffer.from(out, 'latin1');
  }

  /** Part of a line whose end has not come yet: what to send now. */
  #more(part: string): string {
    if (this.#passing) {
      if (this.#flowing) return part;
      return this.#checkHead(part);
    }
    this.#line += part;
    if (this.#heldBytes + this.#line.length <= MAX_EVENT_BYTES) return '';
    // The event outgrew the hold: what was held goes now; the line so far is
    // checked as a passing line's head is (it may be `event: endpoint`).
    const line = this.#line;
    this.#line = '';
    return this.#release() + this.#checkHead(line);
  }

  /** Passing, a line's beginning: held while it may still read `event: endpoint` (LINE_HEAD), else it and the rest flow. */
  #checkHead(part: string): string {
    if (this.#line.length + part.length <= LINE_HEAD) {
      this.#line += part;
      return '';
    }
    this.#flowing = true;
    const out = this.#line + part;
    this.#line = '';
    return out;
  }

  /** A line ended (`eol` its CR, LF or CRLF; `rest` its last part): what to send now. */
  #endLine(rest: string, eol: string): string {
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
      // An endpoint event too long to hold: its type line becomes a comment (its
      // end kept, so client and guard end lines alike), and no client takes it for one.
      return (isEndpointType(line) ? ':' : line) + eol;
    }
    const line = this.#line + rest;
    this.#line = '';
    if (line.length === 0) return this.#dispatch() + eol; // the blank line: the event is complete
    // A comment between events (a server's keep-alive) goes at once: holding it would starve a client's idle timer.
    if (this.#lines.length === 0 && line.charCodeAt(0) === 58) return line + eol;
    this.#hold(line + eol);
    if (this.#heldBytes <= MAX_EVENT_BYTES) return '';
    return this.#release();
  }

  /**
   * The held lines of an event that outgrew the hold, to pass on: any
   * `event: endpoint` line made a comment, as later lines of it will be, since
   * its data can no longer be rewritten.
   */
  #release(): string {
    let out = '';
    for (const line of this.#lines) {
      const content = stripEol(line);
      out += isEndpointType(content) ? `:${line.slice(content.length)}` : line;
    }
    this.#lines = [];
    this.#heldBytes = 0;
    this.#endpointHeld = false;
    this.#passing = true;
    return out;
  }

  #hold(line: string): void {
    this.#lines.push(line);
    this.#heldBytes += line.length;
    if (line.startsWith('event') && isEndpointType(stripEol(line))) this.#endpointHeld = true;
  }

  /** The held event, complete: rewritten when it is an endpoint event. */
  #dispatch(): string {
    const lines = this.#lines;
    this.#lines = [];
    this.#heldBytes = 0;
    if (lines.length === 0) return '';
    // No `event: endpoint` line: no endpoint event, passed as it came without reading its lines.
    if (!this.#endpointHeld) return lines.length === 1 ? lines[0]! : lines.join('');
    this.#endpointHeld = false;
    let type = '';
    let data: string[] | null = null;
    let firstData = -1;
    for (let i = 0; i < lines.length; i++) {
      const field = parseField(stripEol(lines[i]!));
      if (field === null) continue;
      if (field.name === 'event') type = field.value;
      else if (field.name === 'data') {
        (data ??= []).push(field.value);
        if (firstData === -1) firstData = i;
      }
    }
    const event = lines.join('');
    if (type !== 'endpoint' || data === null) return event;
    // The client joins data lines with LF, and its URL parser drops LF and tabs.
    const ref = data.join('\n');
    const rebased = rebaseReference(ref, this.#base, this.#prefix, 'root');
    // Unchanged (an absolute URL, or nothing to resolve): as it came, its lines as they were.
    if (rebased === ref) return event;
    let rewritten = '';
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!;
      const content = stripEol(line);
      const field = parseField(content);
      if (field !== null && field.name === 'data') {
        if (i === firstData) rewritten += `data: ${rebased}${line.slice(content.length)}`;
        continue;
      }
      rewritten += line;
    }
    return redactCapture(Buffer.from(rewritten, 'latin1'), this.#secrets, false).toString('latin1');
  }
}

/** The bytes end with a blank line, LF LF or CRLF CRLF (a CR last would leave its line's end open): whole events. */
function endsEvents(bytes: Buffer): boolean {
  const n = bytes.length;
  if (n < 2 || bytes[n - 1] !== 10) return false;
  return bytes[n - 2] === 10 || (n >= 4 && bytes[n - 2] === 13 && bytes[n - 3] === 10 && bytes[n - 4] === 13);
}

const ENDPOINT = Buffer.from('endpoint');

/** Some line ends in `endpoint`: every `event: endpoint` line does, whatever its line end. */
function hasLineEndingInEndpoint(bytes: Buffer): boolean {
  for (let at = bytes.indexOf(ENDPOINT); at !== -1; at = bytes.indexOf(ENDPOINT, at + 1)) {
    const next = bytes[at + ENDPOINT.length];
    if (next === 10 || next === 13 || next === undefined) return true;
  }
  return false;
}

/** Lines ended by LF only, from a line's start: whether one is `event: endpoint` (or `event:endpoint`). */
function hasEndpointTypeLine(lines: string): boolean {
  return lines.startsWith('event: endpoint\n') || lines.startsWith('event:endpoint\n') || lines.includes('\nevent: endpoint\n') || lines.includes('\nevent:endpoint\n');
}

/** A line (without its end) that sets the event's type to `endpoint`. */
function isEndpointType(line: string): boolean {
  const field = parseField(line);
  return field !== null && field.name === 'event' && field.value === 'endpoint';
}

/** The line without its end. */
function stripEol(line: string): string {
  let end = line.length;
  while (end > 0 && (line.charCodeAt(end - 1) === 10 || line.charCodeAt(end - 1) === 13)) end--;
  return line.slice(0, end);
}

/**
 * A line's field as a client reads it: null for a comment. No BOM is looked
 * for: the guard sends its own comment line first (stream-response.ts), so an
 * upstream's BOM is no stream's start to the client, but part of a field name.
 */
function parseField(line: string): { name: string; value: string } | null {
  if (line.length === 0 || line.charCodeAt(0) === 58) return null;
  const colon = line.indexOf(':');
  if (colon === -1) return { name: line, value: '' };
  let value = line.slice(colon + 1);
  if (value.charCodeAt(0) === 32) value = value.slice(1);
  return { name: line.slice(0, colon), value };
}

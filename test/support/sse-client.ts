// A reader of a server-sent event stream for tests: opens it with fetch, parses
// events (RFC-less but WHATWG "event stream" rules: fields per line, a blank
// line ends an event, a line starting with ':' is a comment) as they arrive, and
// lets a test wait for the next event or comment.

export interface SseEvent {
  event: string;
  id: string;
  data: string;
}

export interface SseClient {
  status: number;
  headers: Headers;
  /** Milliseconds from the request to the response head. */
  headMs: number;
  events: SseEvent[];
  comments: string[];
  /** The first event (from `from` on) that `match` accepts, or null after `ms`. */
  nextEvent(match?: (e: SseEvent) => boolean, ms?: number, from?: number): Promise<SseEvent | null>;
  /** Resolves when `count` comments with this text have arrived, or false after `ms`. */
  comment(text: string, count: number, ms: number): Promise<boolean>;
  /** Resolves when the server ends the stream (true), or false after `ms`. */
  ended(ms: number): Promise<boolean>;
  close(): void;
}

export async function openSse(url: string, headers: Record<string, string>): Promise<SseClient> {
  const controller = new AbortController();
  const started = Date.now();
  const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal });
  const headMs = Date.now() - started;
  const events: SseEvent[] = [];
  const comments: string[] = [];
  const waiters = new Set<() => void>();
  let done = false;
  const wake = () => {
    for (const w of [...waiters]) w();
  };
  if (res.body !== null && res.ok) {
    void (async () => {
      const decoder = new TextDecoder();
      let buffer = '';
      let current: SseEvent = { event: 'message', id: '', data: '' };
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          buffer += decoder.decode(chunk, { stream: true });
          let nl: number;
          while ((nl = buffer.indexOf('\n')) !== -1) {
            const line = buffer.slice(0, nl);
            buffer = buffer.slice(nl + 1);
            if (line === '') {
              if (current.data !== '' || current.id !== '') events.push(current);
              current = { event: 'message', id: '', data: '' };
            } else if (line.startsWith(':')) comments.push(line.slice(1));
            else {
              const colon = line.indexOf(':');
              const field = colon === -1 ? line : line.slice(0, colon);
              const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
              if (field === 'event') current.event = value;
              else if (field === 'id') current.id = value;
              else if (field === 'data') current.data = current.data === '' ? value : `${current.data}\n${value}`;
            }
          }
          wake();
        }
      } catch {
        // aborted by close()
      }
      done = true;
      wake();
    })();
  } else {
    done = true;
  }
  const waitFor = <T>(check: () => T | undefined, ms: number, fallback: T): Promise<T> =>
    new Promise((resolve) => {
      const tryNow = () => {
        const value = check();
        if (value !== undefined) {
          finish(value);
          return true;
        }
        return false;
      };
      const finish = (value: T) => {
        clearTimeout(timer);
        waiters.delete(listener);
        resolve(value);
      };
      const listener = () => {
        if (!tryNow() && done) finish(fallback);
      };
      const timer = setTimeout(() => finish(fallback), ms);
      waiters.add(listener);
      listener();
    });
  return {
    status: res.status,
    headers: res.headers,
    headMs,
    events,
    comments,
    nextEvent: (match = () => true, ms = 5000, from = 0) => waitFor(() => events.slice(from).find(match), ms, null),
    comment: (text, count, ms) => waitFor(() => (comments.filter((c) => c.trim() === text).length >= count ? true : undefined), ms, false),
    ended: (ms) => waitFor(() => (done ? true : undefined), ms, false),
    close: () => controller.abort(),
  };
}

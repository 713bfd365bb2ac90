// The live tail: GET /audit/stream read with fetch (EventSource cannot send the
// Authorization header, and the token must never go in a URL), parsed as server-sent events.
import { answered, authHeaders, expired } from './api.js';
import type { AuditEntry } from './types.js';

/** Starts reading; returns the function that stops it. */
export function followAudit(query: string, onEntry: (entry: AuditEntry) => void, onState: (state: 'open' | 'closed' | string) => void): () => void {
  const controller = new AbortController();
  void (async () => {
    try {
      const res = await fetch(`/audit/stream${query}`, { headers: { accept: 'text/event-stream', ...authHeaders() }, signal: controller.signal });
      if (!res.ok || res.body === null) {
        answered(res.status); // a refused token: back to the login page
        const body = (await res.json().catch(() => ({}))) as { message?: string };
        onState(body.message ?? `HTTP ${res.status}`);
        return;
      }
      onState('open');
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      let tokenEnded = false;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let event = 'message';
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) event = line.slice(6).trim();
            else if (line.startsWith('data:')) data += line.slice(5).replace(/^ /, '');
          }
          if (event === 'audit' && data !== '') onEntry(JSON.parse(data) as AuditEntry);
          else if (event === 'expired') tokenEnded = true;
        }
      }
      // The service ends a stream with `expired` when the token it was opened with expires: log in again.
      if (tokenEnded) expired();
      else onState('closed');
    } catch (err) {
      if (!controller.signal.aborted) onState(err instanceof Error ? err.message : 'the stream failed');
    }
  })();
  return () => controller.abort();
}

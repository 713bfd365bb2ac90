// What the bench upstream serves, shared by the upstream and the scenarios.

/** ~200-byte JSON, the typical small API answer. */
export const SMALL_PATH = '/small';
/** A 64 KiB body (Content-Length known). */
export const LARGE_PATH = '/64k';
export const LARGE_BYTES = 64 * 1024;
/** Reads the request body whole, then answers small JSON with the byte count. */
export const SINK_PATH = '/sink';
/** Server-sent events: the first event at once, then SSE_EVENTS - 1 more, SSE_INTERVAL_MS apart. */
export const SSE_PATH = '/sse';
export const SSE_EVENTS = 3;
export const SSE_INTERVAL_MS = 5;
/** `/download?bytes=N`: N bytes streamed with back-pressure (Content-Length N). */
export const DOWNLOAD_PATH = '/download';
/** A path the bench policy denies (the guard answers 403 itself). */
export const DENIED_PATH = '/admin/settings';

/** The JSON body of SMALL_PATH: built once, 200 bytes give or take. */
export const SMALL_BODY = JSON.stringify({
  id: 'c0ffee00-1234-4abc-8def-0123456789ab',
  title: 'Tool-Call Guard bench',
  state: 'open',
  labels: ['bench', 'small'],
  comments: 3,
  created_at: '2026-01-01T00:00:00.000Z',
  author: { login: 'bench-bot', id: 42 },
});

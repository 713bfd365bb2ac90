// Structured JSON logs (pino), one object per line on stdout. Callers pass
// fields named by the constants in FIELD, never preformatted strings holding
// request data, so that nothing secret slips in by interpolation: agent keys are
// logged by their prefix only, credential values never.
import { pino, stdSerializers, type DestinationStream } from 'pino';
import type { LogLevel } from './config.js';

/** Field names of every log line, so that dashboards and queries can rely on them. */
export const FIELD = {
  requestId: 'request_id',
  agentId: 'agent_id',
  keyPrefix: 'key_prefix',
  method: 'method',
  tool: 'tool',
  path: 'path',
  status: 'status',
  decision: 'decision',
  rule: 'rule',
  latencyMs: 'latency_ms',
  upstreamMs: 'upstream_ms',
  requestBytes: 'request_bytes',
  responseBytes: 'response_bytes',
  role: 'role',
  err: 'err',
} as const;

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  isLevelEnabled(level: LogLevel): boolean;
}

/**
 * Standard output as pino's own default (SonicBoom on fd 1, flushed at exit),
 * muted when it breaks. pino mutes it on EPIPE only: a terminal that closed
 * (SIGHUP) fails every write with EIO, which became an uncaught error, and
 * pino's flush at exit retried the failed write for ever, the process hung
 * with its locks held and its calls in flight unanswered.
 */
function stdoutDestination(): DestinationStream {
  const stream = pino.destination({ dest: process.stdout.fd ?? 1 });
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EIO' && err.code !== 'EPIPE') throw err;
    const noop = (): void => undefined;
    Object.assign(stream, { write: noop, end: noop, flushSync: noop, destroy: noop });
  });
  return stream;
}

/** A logger at `level`; `write` receives each line (tests collect them), stdout by default. */
export function createLogger(level: LogLevel, write?: (line: string) => void): Logger {
  const destination: DestinationStream = write !== undefined ? { write } : stdoutDestination();
  const base = pino(
    {
      level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      serializers: { err: stdSerializers.err },
    },
    destination,
  );
  return {
    debug: (msg, fields) => base.debug(fields ?? {}, msg),
    info: (msg, fields) => base.info(fields ?? {}, msg),
    warn: (msg, fields) => base.warn(fields ?? {}, msg),
    error: (msg, fields) => base.error(fields ?? {}, msg),
    isLevelEnabled: (lvl) => base.isLevelEnabled(lvl),
  };
}

// Structured JSON logs, one object per line on stdout. Callers pass fields, never
// preformatted strings holding request data, so that nothing secret slips in by
// interpolation (agent keys are logged by prefix only; credential values never).
import type { LogLevel } from './config.js';

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function createLogger(level: LogLevel, write: (line: string) => void = (line) => process.stdout.write(line)): Logger {
  const min = LEVELS[level];
  const emit = (lvl: LogLevel) => (msg: string, fields?: Record<string, unknown>) => {
    if (LEVELS[lvl] < min) return;
    write(JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields }, errorReplacer) + '\n');
  };
  return { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
}

function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) {
    const code = (value as { code?: unknown }).code;
    return { name: value.name, message: value.message, ...(code !== undefined ? { code } : {}), stack: value.stack };
  }
  return value;
}

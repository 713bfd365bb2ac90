// The body of every entry point (main.ts, main-proxy.ts, main-admin.ts): config
// validated once, before anything heavy is loaded; the process started; signals
// wired to the ordered stop of lifecycle.ts.
import { loadConfig, type Config } from '../shared/config.js';
import { createLogger } from '../shared/log.js';
import { startProblems, type Role } from './roles.js';

/**
 * The same signal again within this many milliseconds is the same request to
 * stop: a terminal's Ctrl-C or a supervisor signals the whole process group,
 * and `npm start` forwards its own copy to us as well (measured 0 to 11 ms
 * apart). A person pressing Ctrl-C again takes longer than this.
 */
export const DUPLICATE_SIGNAL_MS = 250;

/**
 * The body of every entry point: config validated once, the process started,
 * the first SIGINT/SIGTERM/SIGHUP drains and flushes, a second one exits at once
 * (a copy of the first arriving with it is not a second one).
 */
export async function runMain(role: Role): Promise<void> {
  let config: Readonly<Config>;
  try {
    config = loadConfig();
  } catch (err) {
    process.stderr.write(`tool-call-guard: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const problems = startProblems(config, role);
  if (role !== 'admin') {
    // Read here, before the stores are opened and DATA_DIR filled (it was read as
    // the proxy was built); imported only by roles that proxy.
    const { createAllowList } = await import('../proxy/ssrf-rules.js');
    try {
      createAllowList(config.allowTargets);
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  if (problems.length > 0) {
    process.stderr.write(`tool-call-guard: cannot start the ${role} process:\n  ${problems.join('\n  ')}\n`);
    process.exit(2);
  }
  const log = createLogger(config.logLevel);
  // Imported only now: a refused configuration answers before the stores, uWS
  // and (in all-in-one) the embedded ClickHouse are loaded.
  const { startService } = await import('./compose.js');
  const service = await startService(config, log, role).catch((err: unknown) => {
    log.error('failed to start', { role, err });
    process.exit(1);
  });
  log.info('listening', { role, url: service.url, public_url: service.publicUrl, data_dir: config.dataDir });
  process.stdout.write(`Tool-Call Guard (${role}) listening on ${service.url} (public URL ${service.publicUrl}, data in ${config.dataDir})\n`);

  let first: { signal: NodeJS.Signals; at: number } | null = null;
  // SIGHUP (the terminal of `npm start` closed) stops as SIGTERM does: by
  // default it killed the process without a drain, and a call already at its
  // tool went unaudited. Writes to that terminal now fail (EIO): the log mutes
  // itself (shared/log.ts), and so does anything else written there.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      if (signal === 'SIGHUP') for (const out of [process.stdout, process.stderr]) out.on('error', () => undefined);
      const now = performance.now();
      if (first !== null) {
        if (signal === first.signal && now - first.at < DUPLICATE_SIGNAL_MS) return; // the group's copy and npm's
        log.warn('second signal: exiting without waiting for the drain', { role, signal });
        process.exit(130);
      }
      first = { signal, at: now };
      log.info('shutting down', { role, signal });
      service.stop(config.shutdownDrainMs).then(
        () => process.exit(0),
        (err: unknown) => {
          log.error('shutdown failed', { err });
          process.exit(1);
        },
      );
    });
  }
}

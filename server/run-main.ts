// The body of every entry point (main.ts, main-proxy.ts, main-admin.ts): config
// validated once, before anything heavy is loaded; the process started; signals
// wired to the ordered stop of lifecycle.ts.
import { loadConfig, type Config } from '../shared/config.js';
import { createLogger } from '../shared/log.js';
import { splitModeProblems, startService, type Role } from './compose.js';

/**
 * The body of every entry point: config validated once, the process started,
 * the first SIGINT/SIGTERM drains and flushes, a second one exits at once.
 */
export async function runMain(role: Role): Promise<void> {
  let config: Readonly<Config>;
  try {
    config = loadConfig();
  } catch (err) {
    process.stderr.write(`tool-call-guard: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const problems = splitModeProblems(config, role);
  if (problems.length > 0) {
    process.stderr.write(`tool-call-guard: cannot start the ${role} process:\n  ${problems.join('\n  ')}\n`);
    process.exit(2);
  }
  const log = createLogger(config.logLevel);
  const service = await startService(config, log, role).catch((err: unknown) => {
    log.error('failed to start', { role, err });
    process.exit(1);
  });
  log.info('listening', { role, url: service.url, public_url: service.publicUrl, data_dir: config.dataDir });
  process.stdout.write(`Tool-Call Guard (${role}) listening on ${service.url} (public URL ${service.publicUrl}, data in ${config.dataDir})\n`);

  let signals = 0;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (++signals > 1) process.exit(130);
      log.info('shutting down', { role, signal });
      service.stop().then(
        () => process.exit(0),
        (err: unknown) => {
          log.error('shutdown failed', { err });
          process.exit(1);
        },
      );
    });
  }
}

// `npm start`: the all-in-one service. Config is validated once; the first
// SIGINT/SIGTERM drains and flushes the audit, a second one exits at once.
import { loadConfig } from './shared/config.js';
import { createLogger } from './shared/log.js';
import { startService } from './service.js';

let config;
try {
  config = loadConfig();
} catch (err) {
  process.stderr.write(`tool-call-guard: ${(err as Error).message}\n`);
  process.exit(2);
}
const log = createLogger(config.logLevel);
const service = await startService(config, log).catch((err: unknown) => {
  log.error('failed to start', { err });
  process.exit(1);
});
log.info('listening', { url: service.url, public_url: config.publicUrl, data_dir: config.dataDir, mode: 'all-in-one' });
process.stdout.write(`Tool-Call Guard listening on ${service.url} (public URL ${config.publicUrl}, data in ${config.dataDir})\n`);

let signals = 0;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (++signals > 1) process.exit(130);
    log.info('shutting down', { signal });
    service.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error('shutdown failed', { err });
        process.exit(1);
      },
    );
  });
}

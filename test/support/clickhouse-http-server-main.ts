// Runs the ClickHouse HTTP test server (clickhouse-http-server.ts) as a process
// of its own:
//
//   node <loader options> test/support/clickhouse-http-server-main.ts \
//     --data-dir DIR [--port P] [--user U]      (password: CLICKHOUSE_HTTP_SERVER_PASSWORD)
//
// Tests start it with spawnClickHouseHttpServer(), which passes on the test
// process's Node options (tap's TypeScript loader among them). Prints
// `listening <url>` on stdout once it accepts queries; SIGTERM or SIGINT stops
// it cleanly (chDB closed) with exit code 0; a start failure exits with 1.
import { parseArgs } from 'node:util';
import { startClickHouseHttpServer } from './clickhouse-http-server.js';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'data-dir': { type: 'string' },
      port: { type: 'string', default: '0' },
      user: { type: 'string' },
      password: { type: 'string' },
    },
    strict: true,
  });
  const dataDir = values['data-dir'];
  if (dataDir === undefined || dataDir === '') throw new Error('--data-dir is required');
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new Error(`--port must be 0..65535, not ${values.port}`);
  const password = values.password ?? process.env.CLICKHOUSE_HTTP_SERVER_PASSWORD;

  const server = await startClickHouseHttpServer({
    dataDir,
    port,
    ...(values.user !== undefined ? { user: values.user } : {}),
    ...(password !== undefined ? { password } : {}),
  });
  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    server.stop().then(
      () => process.exit(0),
      (e: unknown) => {
        process.stderr.write(`stopping failed: ${e instanceof Error ? e.stack : String(e)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdout.write(`listening ${server.url}\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`clickhouse-http-server: ${e instanceof Error ? e.stack : String(e)}\n`);
  process.exit(1);
});

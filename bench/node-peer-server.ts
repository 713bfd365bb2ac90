// The Node comparator, run as its own process: fastify with @fastify/http-proxy
// (undici underneath, like the guard), forwarding every path to the bench
// upstream over HTTPS with the certificate verified against the test CA, and
// adding the same bearer credential the guard injects.
// Env: UPSTREAM_ORIGIN (https://127.0.0.1:<port>), BEARER. Prints
// `BENCH_NODE_PEER_READY port=<n>`; SIGTERM stops it.
import { readFileSync } from 'node:fs';
import proxy from '@fastify/http-proxy';
import Fastify from 'fastify';
import { CA_FILE } from './paths.js';

const upstream = process.env.UPSTREAM_ORIGIN ?? '';
if (!upstream.startsWith('https://127.0.0.1:')) {
  process.stderr.write('node-peer: UPSTREAM_ORIGIN must be https://127.0.0.1:<port>\n');
  process.exit(2);
}
const authorization = `Bearer ${process.env.BEARER ?? ''}`;

const app = Fastify({ logger: false, bodyLimit: 16 * 1024 * 1024 });
await app.register(proxy, {
  upstream,
  undici: {
    // reply-from's default sets tls.rejectUnauthorized false; undici spreads `connect`
    // after `tls`, so this turns verification back on, against the test CA.
    connect: { rejectUnauthorized: true, ca: readFileSync(CA_FILE, 'utf8') },
  },
  replyOptions: {
    rewriteRequestHeaders: (_request, headers) => ({ ...headers, authorization }),
  },
});
await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
const port = typeof address === 'object' && address !== null ? address.port : 0;
process.stdout.write(`BENCH_NODE_PEER_READY port=${port}\n`);

const stop = (): void => {
  void app.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);

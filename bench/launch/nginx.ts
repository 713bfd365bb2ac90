// nginx as a reverse proxy to the bench upstream, the non-Node comparator: its
// config is written into a temp dir (pid, logs and temp files stay there) and it
// runs in the foreground as a child (`-p <dir> -c <conf> -g 'daemon off;'`).
// Tuned the way a careful operator would put nginx in front of an HTTPS API:
// upstream keep-alive, TLS verified against the test CA, no access log.
import { mkdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { CA_FILE } from '../paths.js';
import { freePort, startProcess } from '../processes.js';
import type { Target } from '../target.js';

export function nginxConfig(options: { dir: string; port: number; upstreamPort: number; bearer: string; runAsRoot: boolean }): string {
  const { dir, port, upstreamPort, bearer } = options;
  return `# Written by the Tool-Call Guard bench (bench/launch/nginx.ts).
worker_processes 1;
${options.runAsRoot ? 'user root;' : ''}
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} warn;

events {
  worker_connections 4096;
}

http {
  access_log off;
  client_body_temp_path ${join(dir, 'client_body')};
  proxy_temp_path ${join(dir, 'proxy_temp')};
  fastcgi_temp_path ${join(dir, 'fastcgi_temp')};
  uwsgi_temp_path ${join(dir, 'uwsgi_temp')};
  scgi_temp_path ${join(dir, 'scgi_temp')};
  # Like the guard: keep client connections for as long as the client wants,
  # and hold request bodies up to 64 KiB in memory (the guard's SMALL_BODY_BYTES).
  keepalive_requests 1000000;
  client_body_buffer_size 64k;
  client_max_body_size 16m;

  upstream bench_upstream {
    server 127.0.0.1:${upstreamPort};
    keepalive 64;
    keepalive_requests 1000000;
  }

  server {
    listen 127.0.0.1:${port};

    location / {
      proxy_pass https://bench_upstream;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host 127.0.0.1:${upstreamPort};
      # The same credential the guard injects.
      proxy_set_header Authorization "Bearer ${bearer}";
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate ${CA_FILE};
      proxy_ssl_server_name on;
      # The test certificate names localhost (and 127.0.0.1 only as an IP SAN, which nginx's host check does not read).
      proxy_ssl_name localhost;
      proxy_ssl_session_reuse on;
      # Stream large bodies with back-pressure instead of spooling them to disk.
      proxy_buffer_size 16k;
      proxy_buffers 16 16k;
      proxy_max_temp_file_size 0;
    }
  }
}
`;
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function startNginx(nginxBinary: string, tmpDir: string, upstreamPort: number, bearer: string): Promise<Target> {
  const dir = join(tmpDir, 'nginx');
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  writeFileSync(conf, nginxConfig({ dir, port, upstreamPort, bearer, runAsRoot: process.getuid?.() === 0 }));
  const { proc } = await startProcess({
    name: 'nginx',
    command: nginxBinary,
    args: ['-p', dir, '-c', conf, '-g', 'daemon off;'],
    ready: () => accepts(port),
    readyTimeoutMs: 10_000,
  });
  return { name: 'nginx', origin: `http://127.0.0.1:${port}`, pathFor: (upstreamPath) => upstreamPath, proc };
}

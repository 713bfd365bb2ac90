// The bench's probe client sends a request again, once, when the kept-alive
// socket it was written on had been closed by the server (a round of the quick
// bench was lost to this race: "socket hang up"), and only then.
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import t from 'tap';
import { BenchHttp } from '../../bench/http-client.js';

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as { port: number }).port;
}

t.test('a request on a socket the server dropped is sent again on a new one', async (t) => {
  const served = new WeakMap<Socket, number>();
  let handled = 0;
  const server = createServer((req, res) => {
    const n = (served.get(req.socket) ?? 0) + 1;
    served.set(req.socket, n);
    // The second request on a socket finds it closed, as one written just as
    // the server's idle timeout fires does.
    if (n === 2) { req.socket.destroy(); return; }
    handled++;
    res.end('ok');
  });
  const port = await listen(server);
  const http = new BenchHttp();
  t.teardown(() => { http.close(); server.close(); });
  const url = `http://127.0.0.1:${port}/`;
  t.equal((await http.exchange(url, { timeoutMs: 5000 })).status, 200);
  const again = await http.exchange(url, { timeoutMs: 5000 });
  t.equal(again.status, 200, 'answered on a new socket');
  t.equal(handled, 2, 'each request answered once');
});

t.test('a request on a new socket that the server drops fails: no retry', async (t) => {
  let seen = 0;
  const server = createServer((req) => { seen++; req.socket.destroy(); });
  const port = await listen(server);
  const http = new BenchHttp();
  t.teardown(() => { http.close(); server.close(); });
  await t.rejects(http.exchange(`http://127.0.0.1:${port}/`, { timeoutMs: 5000 }), /socket hang up/);
  t.equal(seen, 1, 'sent once');
});

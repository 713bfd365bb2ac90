// Once the drain is over and the audit flush began, a request that still
// arrives on a kept-alive connection gets no answer: its connection is closed.
// An answer then would be a call whose record misses the flush (CI once counted
// more answered calls than audit rows under SIGTERM on a slow machine).
import { connect, type Socket } from 'node:net';
import t from 'tap';
import { createAgent, signup, startTestService } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';

const upstream = await startUpstream();
const service = await startTestService();
t.teardown(async () => {
  await upstream.close();
  await service.close();
});

/** Sends one request on `socket` and resolves with all bytes read until the answer is complete or the socket closes. */
function exchange(socket: Socket, path: string): Promise<{ bytes: string; closed: boolean }> {
  return new Promise((resolve) => {
    let bytes = '';
    const onData = (chunk: Buffer) => {
      bytes += chunk.toString('latin1');
      const end = bytes.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(bytes);
      if (end !== -1 && length !== null && bytes.length >= end + 4 + Number(length[1])) finish(false);
    };
    const onClose = () => finish(true);
    const finish = (closed: boolean) => {
      socket.off('data', onData);
      socket.off('close', onClose);
      resolve({ bytes, closed });
    };
    socket.on('data', onData);
    socket.on('close', onClose);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  });
}

t.test('a request on a kept-alive connection after the drain is not answered, and every answered call is audited', async (t) => {
  const owner = await signup(service.url);
  const agent = await createAgent(service.url, owner, 'kept-alive', 'none');
  const socket = connect(service.port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  const path = `/proxy/${agent.api_key}/${upstream.authority}/json`;
  const first = await exchange(socket, path);
  t.match(first.bytes, /^HTTP\/1\.1 200 /, 'the call before shutdown is answered');
  t.notOk(first.closed, 'and the connection is kept alive');
  const auditedBefore = service.pipeline!.audited;
  await service.stop(0);
  const second = await exchange(socket, path);
  t.equal(second.bytes, '', 'no byte of an answer after the flush began');
  t.ok(second.closed, 'the connection is closed');
  t.equal(service.pipeline!.audited, auditedBefore, 'nothing was answered, so nothing was left to record');
  socket.destroy();
});

// Raw HTTP/1.1 over a net socket, for requests fetch will not send (custom
// framing, Connection-named headers, dot segments, smuggling attempts).
import { connect } from 'node:net';

export interface RawResponse {
  /** Everything the server sent before it closed or went quiet. */
  text: string;
  status: number;
  closed: boolean;
}

export function rawRequest(port: number, bytes: string | Buffer, quietMs = 1500): Promise<RawResponse> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let timer: NodeJS.Timeout;
    let closed = false;
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      const text = Buffer.concat(chunks).toString('latin1');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
      resolve({ text, status: m ? Number(m[1]) : 0, closed });
    };
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(finish, quietMs);
    };
    socket.on('data', (c: Buffer) => {
      chunks.push(c);
      arm();
    });
    socket.on('close', () => {
      closed = true;
      finish();
    });
    socket.on('error', () => undefined);
    socket.write(bytes);
    arm();
  });
}

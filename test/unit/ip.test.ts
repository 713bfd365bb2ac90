// IP literals (shared/ip.ts): bytes for the SSRF rules, and the client network
// the login limiter counts under. Address strings only; nothing is contacted.
import t from 'tap';
import { clientNetwork, ipBytes } from '../../shared/ip.js';

t.test('an IPv6 client is counted by its /64, in every spelling', async (t) => {
  const net = '2001:db8:1:2::/64';
  for (const address of ['2001:db8:1:2::1', '2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:0DB8:0001:0002:0000:0000:0000:0abc', '2001:db8:1:2:a:b:c:d']) {
    t.equal(clientNetwork(address), net, address);
  }
  t.not(clientNetwork('2001:db8:1:3::1'), net, 'the next /64 is another client');
  t.equal(clientNetwork('::1'), '0:0:0:0::/64');
});

t.test('an IPv4 client is counted by its address, also when written IPv4-mapped', async (t) => {
  t.equal(clientNetwork('127.0.6.1'), '127.0.6.1');
  t.equal(clientNetwork('::ffff:127.0.6.1'), '127.0.6.1');
  t.equal(clientNetwork('0000:0000:0000:0000:0000:ffff:7f00:0601'), '127.0.6.1', 'the hex form uWS may report');
  t.not(clientNetwork('127.0.6.2'), clientNetwork('127.0.6.1'));
});

t.test('text that is no IP literal is its own key', async (t) => {
  t.equal(clientNetwork('unix-socket'), 'unix-socket');
  t.equal(clientNetwork('fe80::1%eth0'), 'fe80::1%eth0', 'a zone id is not parsed');
});

t.test('ipBytes decodes IPv4 as IPv4-mapped and every IPv6 form', async (t) => {
  t.strictSame([...ipBytes('1.2.3.4')!], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 1, 2, 3, 4]);
  t.strictSame([...ipBytes('::ffff:1.2.3.4')!], [...ipBytes('1.2.3.4')!]);
  t.strictSame([...ipBytes('::1')!], [...Array(15).fill(0), 1]);
  t.equal(ipBytes('1.2.3'), null);
  t.equal(ipBytes('example.com'), null);
});

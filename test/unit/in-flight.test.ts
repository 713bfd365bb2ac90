// The proxy's list of exchanges in flight (proxy/in-flight.ts): what shutdown
// ends. Exchanges come and go in any order, an exchange is in it once, and a
// slot an exchange left is reused and holds nothing of it.
import t from 'tap';
import { InFlight } from '../../proxy/in-flight.js';
import type { ProxyExchange } from '../../proxy/exchange.js';

const exchange = (name: string) => ({ name, inFlightSlot: -1 }) as unknown as ProxyExchange & { name: string };
const names = (list: InFlight) => list.list().map((ex) => (ex as unknown as { name: string }).name).sort();

t.test('exchanges come and go in any order; size and list follow', async (t) => {
  const list = new InFlight();
  const [a, b, c] = [exchange('a'), exchange('b'), exchange('c')];
  list.add(a);
  list.add(b);
  list.add(c);
  t.equal(list.size, 3);
  list.delete(b);
  t.equal(list.size, 2);
  t.same(names(list), ['a', 'c']);
  t.equal(b.inFlightSlot, -1, 'a gone exchange has no slot');
  list.delete(a);
  list.delete(c);
  t.equal(list.size, 0);
  t.same(list.list(), []);
});

t.test('adding twice or deleting twice changes nothing', async (t) => {
  const list = new InFlight();
  const a = exchange('a');
  list.add(a);
  list.add(a);
  t.equal(list.size, 1);
  list.delete(a);
  list.delete(a);
  t.equal(list.size, 0);
  const never = exchange('never');
  list.delete(never);
  t.equal(list.size, 0, 'deleting one never added changes nothing');
});

t.test('a freed slot is reused, and the exchange that left it is not listed again', async (t) => {
  const list = new InFlight();
  const [a, b] = [exchange('a'), exchange('b')];
  list.add(a);
  const slot = a.inFlightSlot;
  list.delete(a);
  list.add(b);
  t.equal(b.inFlightSlot, slot, 'the slot is reused');
  t.same(names(list), ['b']);
  list.delete(a);
  t.same(names(list), ['b'], "deleting the slot's former exchange leaves its new one");
});

t.test('list is a copy: ending exchanges while going through it is safe', async (t) => {
  const list = new InFlight();
  const all = Array.from({ length: 5 }, (_, i) => exchange(`e${i}`));
  for (const ex of all) list.add(ex);
  for (const ex of list.list()) list.delete(ex);
  t.equal(list.size, 0);
});

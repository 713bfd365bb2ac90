// A store's boundary (shared/stores/store-boundary.ts): a driver's "cannot reach"
// errors leave as StoreUnavailableError, others unchanged; pure methods pass as they are.
import t from 'tap';
import { StoreUnavailableError } from '../../shared/errors.js';
import { guardBoundary, unreachableClassifier } from '../../shared/stores/store-boundary.js';

const classify = unreachableClassifier('test store', (err) => (err as { code?: string }).code === 'ECONNREFUSED');
const refused = () => Object.assign(new Error('connect refused'), { code: 'ECONNREFUSED' });

class Store {
  calls = 0;
  #prefix = 'row';
  read(): number {
    this.calls += 1;
    throw refused();
  }
  async write(): Promise<void> {
    throw refused();
  }
  bug(): void {
    throw new TypeError('a bug');
  }
  encode(n: number): string {
    if (n < 0) throw refused();
    return `${this.#prefix}:${n}:${this.calls}`;
  }
}

t.test('unreachable errors, thrown or rejected, leave as StoreUnavailableError; others as they were', async (t) => {
  const store = guardBoundary(new Store(), classify, ['encode']);
  t.throws(() => store.read(), StoreUnavailableError);
  t.equal(store.calls, 1, 'the method ran on the store itself');
  await t.rejects(store.write(), StoreUnavailableError);
  t.throws(() => store.bug(), TypeError);
});

t.test('a pure method is not wrapped: bound to the store once, its errors as they are', async (t) => {
  const store = guardBoundary(new Store(), classify, ['encode']);
  t.equal(store.encode, store.encode, 'one function, not one per read');
  t.equal(store.encode(7), 'row:7:0', 'runs on the store itself (its #private field is readable)');
  const encode = store.encode.bind(store);
  t.equal(encode(8), 'row:8:0', 'as the batcher calls it, bound once');
  t.throws(() => store.encode(-1), { code: 'ECONNREFUSED' }, 'not classified: it touches no store');
  t.not(store.read, new Store().read, 'the others are wrapped');
});

// A store's boundary (shared/stores/store-boundary.ts): a driver's "cannot reach"
// errors leave as StoreUnavailableError, others unchanged; pure methods pass as they are.
import t from 'tap';
import { StoreUnavailableError } from '../../shared/errors.js';
import { guardBoundary, unreachableClassifier } from '../../shared/stores/store-boundary.js';

const classify = unreachableClassifier('test store', (err) => (err as { code?: string }).code === 'ECONNREFUSED');
const refused = () => Object.assign(new Error('connect refused'), { code: 'ECONNREFUSED' });

class Store {
  calls = 0;
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
    return `${n}:${this.calls}`;
  }
}

t.test('unreachable errors, thrown or rejected, leave as StoreUnavailableError; others as they were', async (t) => {
  const store = guardBoundary(new Store(), classify, ['encode']);
  t.throws(() => store.read(), StoreUnavailableError);
  t.equal(store.calls, 1, 'the method ran on the store itself');
  await t.rejects(store.write(), StoreUnavailableError);
  t.throws(() => store.bug(), TypeError);
});

t.test('a pure method is the store\'s own function, called on the store', async (t) => {
  const inner = new Store();
  const store = guardBoundary(inner, classify, ['encode']);
  t.equal(store.encode, inner.encode, 'no wrapper');
  t.not(store.read, inner.read, 'the others are wrapped');
  t.equal(store.encode.bind(store)(7), '7:0');
});

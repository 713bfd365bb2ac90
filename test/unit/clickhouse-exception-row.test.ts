// A ClickHouse server before 25.11 that fails a query mid-answer keeps the 200
// and ends JSONEachRow output with an exception row; the store must take that
// row for the error it is, not for data (throwIfExceptionRow in
// shared/stores/clickhouse/clickhouse-audit-store.ts).
import t from 'tap';
import { throwIfExceptionRow } from '../../shared/stores/clickhouse/clickhouse-audit-store.js';

/** JSONEachRow text as @clickhouse/client's json() reads it: one object a line. */
const rowsOf = (text: string) => text.trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);

t.test('rows that end with the server\'s exception row are an error', async (t) => {
  const cut = rowsOf('{"id":"a","entry_hash":"x"}\n{"id":"b","entry_hash":"y"}\n{"exception": "Code: 394. DB::Exception: Query was cancelled. (QUERY_WAS_CANCELLED) (version 24.8.14.39 (official build))"}\n');
  t.throws(() => throwIfExceptionRow(cut), /ClickHouse failed the query after its first rows: Code: 394/);
});

t.test('rows without one pass unchanged, an empty answer too', async (t) => {
  const rows = rowsOf('{"id":"a","exceptional":1}\n{"id":"b"}\n');
  t.equal(throwIfExceptionRow(rows), rows);
  t.same(throwIfExceptionRow([]), []);
});

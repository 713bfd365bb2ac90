// The secrets an all-in-one process generates into DATA_DIR (shared/secrets.ts):
// written whole or not at all, kept by a second start, refused clearly when damaged.
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../shared/config.js';
import { createFileOnce, loadAuditSigningKey, loadSecrets } from '../../shared/secrets.js';

const configIn = (dir: string) => loadConfig({ DATA_DIR: dir, PORT: '0' });

t.test('generated secrets are written with mode 0600, no temporary file left, and read back the same on the next start', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-secrets-'));
  const first = loadSecrets(configIn(dir), { allowGenerate: true });
  const key = loadAuditSigningKey(configIn(dir), { allowGenerate: true });
  t.equal(statSync(join(dir, 'secrets.json')).mode & 0o777, 0o600);
  t.equal(statSync(join(dir, 'audit-signing-key.pem')).mode & 0o777, 0o600);
  t.same(readdirSync(dir).filter((name) => name.endsWith('.tmp')), []);
  const again = loadSecrets(configIn(dir), { allowGenerate: true });
  t.same(Buffer.from(again.jwtSecret), Buffer.from(first.jwtSecret));
  t.same(again.encryptionKey, first.encryptionKey);
  t.equal(loadAuditSigningKey(configIn(dir), { allowGenerate: true }).fingerprint, key.fingerprint);
});

t.test('an empty or cut secrets.json (a crash while an older version wrote it) is refused with the file named, not a bare JSON error', async (t) => {
  for (const text of ['', '{"jwt_secret": "abc', 'null']) {
    const dir = mkdtempSync(join(tmpdir(), 'tcg-secrets-'));
    writeFileSync(join(dir, 'secrets.json'), text);
    t.throws(() => loadSecrets(configIn(dir), { allowGenerate: true }), { message: /secrets\.json is damaged; restore it or remove it/ }, JSON.stringify(text));
  }
});

t.test('a file created once keeps the first writer\'s text: a second process starting at once reads it, not its own', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tcg-secrets-'));
  createFileOnce(dir, 'f', 'first');
  createFileOnce(dir, 'f', 'second');
  t.equal(readFileSync(join(dir, 'f'), 'utf8'), 'first');
  t.same(readdirSync(dir), ['f']);
});

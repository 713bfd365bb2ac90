// Credential values at rest (sealValue / openValue, shared/secrets.ts): AES-256-GCM
// bound to the credential's organization and hostname, its tag whole.
import t from 'tap';
import { credentialAssociatedData, openValue, sealValue } from '../../shared/secrets.js';

const KEY = Buffer.alloc(32, 9);
const BOUND = credentialAssociatedData('org-1', 'api.example.com');

t.test('a sealed value opens with its key and binding, and with nothing else', async (t) => {
  const sealed = sealValue(KEY, 'tok-123', BOUND);
  t.equal(openValue(KEY, sealed, BOUND), 'tok-123');
  t.throws(() => openValue(KEY, sealed, credentialAssociatedData('org-2', 'api.example.com')), 'another organization');
  t.throws(() => openValue(KEY, sealed, credentialAssociatedData('org-1', 'evil.example.com')), 'another hostname');
  t.throws(() => openValue(Buffer.alloc(32, 8), sealed, BOUND), 'another key');
});

t.test('a stored value whose tag was cut short is refused, not checked against the shorter tag', async (t) => {
  // GCM accepts tags of 4 to 16 bytes unless told the length: a row cut to 4 bytes
  // of tag would have been checked against 32 bits, which 2^32 guesses forge.
  const sealed = sealValue(KEY, '', BOUND);
  const raw = Buffer.from(sealed.split(':')[1]!, 'base64');
  const cut = `${sealed.split(':')[0]}:${raw.subarray(0, 12 + 4).toString('base64')}`;
  t.throws(() => openValue(KEY, cut, BOUND), 'a 4-byte tag');
  t.throws(() => openValue(KEY, `${sealed.split(':')[0]}:${raw.subarray(0, 8).toString('base64')}`, BOUND), 'no whole IV');
});

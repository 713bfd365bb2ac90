import t, { type Test } from 'tap';
import fc from 'fast-check';
import { BlockList } from 'node:net';
import { classifyAddress, createAllowList } from '../../proxy/ssrf-rules.js';
import { normalizeCredentialHostname, normalizePolicyPath, parseTarget } from '../../shared/target.js';

type Case = readonly [address: string, expected: string | null];

function classifies(t: Test, cases: readonly Case[]): void {
  for (const [address, expected] of cases) t.equal(classifyAddress(address), expected, address);
}

t.test('parseTarget', async (t) => {
  t.test('splits host and path, defaulting to port 443', async (t) => {
    t.same(parseTarget('api.github.com/repos/x?'), {
      host: 'api.github.com',
      port: 443,
      authority: 'api.github.com',
      hostname: 'api.github.com',
      path: '/repos/x?',
    });
  });

  t.test('a target without a path gets path /', async (t) => {
    t.same(parseTarget('api.github.com'), {
      host: 'api.github.com',
      port: 443,
      authority: 'api.github.com',
      hostname: 'api.github.com',
      path: '/',
    });
  });

  t.test('an explicit port other than 443 is part of the authority', async (t) => {
    t.same(parseTarget('api.example.com:8443/v1/items'), {
      host: 'api.example.com',
      port: 8443,
      authority: 'api.example.com:8443',
      hostname: 'api.example.com',
      path: '/v1/items',
    });
  });

  t.test('an explicit :443 is dropped from the authority', async (t) => {
    const target = parseTarget('api.example.com:443/x');
    t.equal(target?.port, 443);
    t.equal(target?.authority, 'api.example.com');
  });

  t.test('the host is lower-cased', async (t) => {
    const target = parseTarget('API.GitHub.COM/Repos/X');
    t.equal(target?.host, 'api.github.com');
    t.equal(target?.path, '/Repos/X', 'the path keeps its case');
  });

  t.test('one trailing dot is dropped from a DNS name, so policy sees one spelling', async (t) => {
    const target = parseTarget('api.github.com.:8443/x');
    t.equal(target?.hostname, 'api.github.com');
    t.equal(target?.authority, 'api.github.com:8443');
  });

  t.test('the path is kept exactly as given: no decoding, no dot-segment removal', async (t) => {
    t.equal(parseTarget('h.example/a/../b/%2e%2e/%2F/./c//d')?.path, '/a/../b/%2e%2e/%2F/./c//d');
    t.equal(parseTarget('h.example/')?.path, '/');
  });

  t.test('IPv6 keeps brackets in host and authority, none in hostname', async (t) => {
    t.same(parseTarget('[::1]:8443/x'), {
      host: '[::1]',
      port: 8443,
      authority: '[::1]:8443',
      hostname: '::1',
      path: '/x',
    });
    t.same(parseTarget('[2606:4700:0:0:0:0:0:1111]'), {
      host: '[2606:4700::1111]',
      port: 443,
      authority: '[2606:4700::1111]',
      hostname: '2606:4700::1111',
      path: '/',
    });
  });

  t.test('IPv4 shorthand and numeric forms become a dotted quad', async (t) => {
    const forms: Case[] = [
      ['127.1', '127.0.0.1'],
      ['2130706433', '127.0.0.1'],
      ['0x7f.0.0.2', '127.0.0.2'],
      ['0177.0.0.2', '127.0.0.2'],
      ['0x7F000001', '127.0.0.1'],
      ['127.0.0.1.', '127.0.0.1'],
      ['0.0.0.0', '0.0.0.0'],
      ['0', '0.0.0.0'],
      ['8.8.8.8', '8.8.8.8'],
    ];
    for (const [input, hostname] of forms) t.equal(parseTarget(`${input}/x`)?.hostname, hostname, input);
  });

  t.test('IPv6 is compressed and lower-cased', async (t) => {
    t.equal(parseTarget('[2001:DB8:0:0::A]/x')?.hostname, '2001:db8::a');
    t.equal(parseTarget('[0:0:0:0:0:0:0:1]/x')?.hostname, '::1');
  });

  t.test('an IPv4-mapped IPv6 address is its IPv4 address (a socket to it reaches that address), so a rule for the address cannot be stepped around', async (t) => {
    for (const spelling of ['[::ffff:127.0.0.2]', '[::FFFF:7F00:2]', '[0:0:0:0:0:ffff:127.0.0.2]']) {
      t.same(parseTarget(`${spelling}:8443/x`), { host: '127.0.0.2', port: 8443, authority: '127.0.0.2:8443', hostname: '127.0.0.2', path: '/x' }, spelling);
    }
    t.equal(parseTarget('[::ffff:0:0]/x')?.hostname, '0.0.0.0');
    t.equal(parseTarget('[::ffff:ffff:ffff]/x')?.hostname, '255.255.255.255');
    t.equal(normalizeCredentialHostname('[::ffff:127.0.0.2]:8443'), '127.0.0.2:8443', 'a credential for it is the IPv4 one');
    for (const other of ['[::7f00:2]', '[64:ff9b::7f00:2]', '[::ffff:0:7f00:2]', '[::fffe:7f00:2]']) {
      t.equal(parseTarget(`${other}/x`)?.hostname.includes('.'), false, `${other} stays IPv6 (not a mapped address)`);
    }
  });

  t.test('every literal spelling of a refused address is refused after normalization', async (t) => {
    const spellings: Case[] = [
      ['127.1', 'loopback'],
      ['2130706433', 'loopback'],
      ['0x7f.0.0.2', 'loopback'],
      ['0177.0.0.2', 'loopback'],
      ['[::ffff:127.0.0.2]', 'loopback'],
      ['[::ffff:7f00:2]', 'loopback'],
      ['[::1]', 'loopback'],
      ['[0:0:0:0:0:0:0:1]', 'loopback'],
      ['0.0.0.0', 'unspecified'],
      ['0', 'unspecified'],
      ['[::]', 'unspecified'],
      ['169.254.169.254', 'link-local'],
      ['0xa9fea9fe', 'link-local'],
      ['[::ffff:169.254.169.254]', 'link-local'],
      ['10.1', 'private'],
    ];
    for (const [input, reason] of spellings) {
      const target = parseTarget(`${input}/latest/meta-data`);
      t.not(target, null, `${input} parses`);
      t.equal(classifyAddress(target?.hostname ?? ''), reason, input);
    }
  });

  t.test('null for an empty host', async (t) => {
    t.equal(parseTarget(''), null);
    t.equal(parseTarget('/x'), null);
    t.equal(parseTarget(':8443/x'), null);
    t.equal(parseTarget('[]/x'), null);
  });

  t.test('null for userinfo in the authority', async (t) => {
    t.equal(parseTarget('user@api.github.com/x'), null);
    t.equal(parseTarget('user:pass@api.github.com/x'), null);
    t.equal(parseTarget('api.github.com@127.0.0.1/x'), null);
    t.equal(parseTarget('@api.github.com/x'), null);
  });

  t.test('null for a port outside 1-65535 or not a number', async (t) => {
    t.equal(parseTarget('api.example.com:0/x'), null, 'port 0');
    t.equal(parseTarget('api.example.com:65536/x'), null, 'port 65536');
    t.equal(parseTarget('api.example.com:99999/x'), null, 'port 99999');
    t.equal(parseTarget('api.example.com:/x'), null, 'empty port');
    t.equal(parseTarget('api.example.com:https/x'), null, 'named port');
    t.equal(parseTarget('api.example.com:-1/x'), null, 'negative port');
    t.equal(parseTarget('api.example.com:80:80/x'), null, 'two ports');
    t.equal(parseTarget('[::1]:0/x'), null, 'IPv6 with port 0');
    t.equal(parseTarget('api.example.com:65535/x')?.port, 65535, '65535 is the largest port');
    t.equal(parseTarget('api.example.com:1/x')?.port, 1, '1 is the smallest port');
  });

  t.test('null for percent-encoding in the host', async (t) => {
    t.equal(parseTarget('%2e/x'), null);
    t.equal(parseTarget('api%2egithub.com/x'), null);
    t.equal(parseTarget('%31%32%37.0.0.1/x'), null);
    t.equal(parseTarget('[fe80::1%25eth0]/x'), null, 'IPv6 zone id');
  });

  t.test('null for characters no DNS name or IP literal has', async (t) => {
    for (const input of [
      'api.github.com\\@evil.example/x',
      'a b.example/x',
      'a"b.example/x',
      'api.github.com#frag/x',
      'api.github.com?q/x',
      'bücher.example/x',
      'a*.example/x',
      'a,b.example/x',
      '[::1/x',
      '::1/x',
      '[::1]x/x',
    ]) {
      t.equal(parseTarget(input), null, input);
    }
  });

  t.test('null for a host the URL parser rejects', async (t) => {
    t.equal(parseTarget('256.0.0.1/x'), null, 'IPv4 octet out of range');
    t.equal(parseTarget('1.2.3.4.5/x'), null, 'five IPv4 parts');
    t.equal(parseTarget('foo.123/x'), null, 'numeric last label');
    t.equal(parseTarget('09.1.1.1/x'), null, 'invalid octal');
    t.equal(parseTarget('[::1::2]/x'), null, 'two ::');
    t.equal(parseTarget('[12345::]/x'), null, 'IPv6 group too long');
  });

  t.test('null for a name that is not a DNS name', async (t) => {
    t.equal(parseTarget('a..b.example/x'), null, 'empty label');
    t.equal(parseTarget('.example/x'), null, 'leading dot');
    t.equal(parseTarget('example../x'), null, 'two trailing dots');
    t.equal(parseTarget(`${'a'.repeat(64)}.example/x`), null, 'label over 63');
    t.not(parseTarget(`${'a'.repeat(63)}.example/x`), null, 'label of 63');
    const long = Array.from({ length: 64 }, () => 'abc').join('.');
    t.equal(parseTarget(`${long}/x`), null, 'name over 253');
  });
});

t.test('normalizePolicyPath', async (t) => {
  t.equal(normalizePolicyPath('/%61dmin//x%2Fy'), '/admin/x/y', 'unreserved and slash escapes decoded, slashes collapsed');
  t.equal(normalizePolicyPath('/a%23b%20c%3f'), '/a%23b%20c%3F', 'other escapes kept, upper-cased');
  // Servers that route on the decoded path read these as the characters: a rule on /@acme/** or /users/me:delete was stepped around.
  t.equal(normalizePolicyPath("/%40acme/x%3Adelete/%21%24%26%27%28%29%2B%2C%3B%3D"), "/@acme/x:delete/!$&'()+,;=", 'escapes of sub-delims, : and @ decoded');
  t.equal(normalizePolicyPath('/public/..%3B/admin'), null, 'so an escaped ; after a dot segment is one too');
  t.equal(normalizePolicyPath('/a/*/b%2a'), '/a/%2A/b%2A', "a call's literal star: one spelling, escaped");
  t.equal(normalizePolicyPath('/a/*/b%2a', true), '/a/*/b%2A', "a glob's star stays the wildcard, its escaped star a literal one");
  for (const path of ['/x/../admin', '/x/%2E%2e/admin', '/./x', '/x/..']) t.equal(normalizePolicyPath(path), null, `dot segment: ${path}`);
  // A dot segment with `;` parameters is one to a servlet container (Tomcat reads /public/..;/admin as /admin).
  for (const path of ['/public/..;/admin', '/public/..;x=1/admin', '/a/.;/b', '/a/%2e%2e;/b']) t.equal(normalizePolicyPath(path), null, `dot segment with parameters: ${path}`);
  for (const path of ['/a/..x/b', '/a;b/c', '/a/.well-known', '/a/x;..']) t.equal(normalizePolicyPath(path), path, `not a dot segment: ${path}`);
  // What a WHATWG-URL server routes as /admin (a fragment cut off, a backslash read as a slash), or some servers decode.
  for (const path of ['/admin#x', '/admin#', '/x\\..\\admin', '/admin\\x', '/x%5C..%5Cadmin', '/a%5cb']) t.equal(normalizePolicyPath(path), null, `refused: ${path}`);
  t.equal(new URL('/x\\..\\admin#y', 'https://h').pathname, '/admin', 'the reading it guards against');
});

t.test('classifyAddress', async (t) => {
  t.test('public unicast addresses are let through', async (t) => {
    classifies(t, [
      ['8.8.8.8', null],
      ['1.1.1.1', null],
      ['140.82.112.3', null],
      ['2606:4700:4700::1111', null],
      ['2001:4860:4860::8888', null],
      ['2A00:1450:4001:0830:0000:0000:0000:200E', null],
    ]);
  });

  t.test('anything that is not an IP literal is invalid', async (t) => {
    for (const input of ['', 'localhost', '127.1', '2130706433', '0x7f.0.0.1', '01.2.3.4', '256.1.1.1', '[::1]', '::1::', 'fe80::1%eth0', ' 8.8.8.8']) {
      t.equal(classifyAddress(input), 'invalid', JSON.stringify(input));
    }
  });

  t.test('0.0.0.0/8 is unspecified', async (t) => {
    classifies(t, [['0.0.0.0', 'unspecified'], ['0.255.255.255', 'unspecified'], ['1.0.0.0', null]]);
  });

  t.test('10.0.0.0/8 is private', async (t) => {
    classifies(t, [['9.255.255.255', null], ['10.0.0.0', 'private'], ['10.255.255.255', 'private'], ['11.0.0.0', null]]);
  });

  t.test('100.64.0.0/10 is cgnat', async (t) => {
    classifies(t, [['100.63.255.255', null], ['100.64.0.0', 'cgnat'], ['100.127.255.255', 'cgnat'], ['100.128.0.0', null]]);
  });

  t.test('127.0.0.0/8 is loopback', async (t) => {
    classifies(t, [['126.255.255.255', null], ['127.0.0.0', 'loopback'], ['127.0.0.1', 'loopback'], ['127.255.255.255', 'loopback'], ['128.0.0.0', null]]);
  });

  t.test('169.254.0.0/16 is link-local (cloud metadata)', async (t) => {
    classifies(t, [['169.253.255.255', null], ['169.254.0.0', 'link-local'], ['169.254.169.254', 'link-local'], ['169.254.255.255', 'link-local'], ['169.255.0.0', null]]);
  });

  t.test('172.16.0.0/12 is private', async (t) => {
    classifies(t, [['172.15.255.255', null], ['172.16.0.0', 'private'], ['172.31.255.255', 'private'], ['172.32.0.0', null]]);
  });

  t.test('192.0.0.0/24 is reserved', async (t) => {
    classifies(t, [['191.255.255.255', null], ['192.0.0.0', 'reserved'], ['192.0.0.255', 'reserved'], ['192.0.1.0', null]]);
  });

  t.test('192.0.2.0/24 is documentation', async (t) => {
    classifies(t, [['192.0.1.255', null], ['192.0.2.0', 'documentation'], ['192.0.2.255', 'documentation'], ['192.0.3.0', null]]);
  });

  t.test('192.88.99.0/24 is the deprecated 6to4 relay', async (t) => {
    classifies(t, [['192.88.98.255', null], ['192.88.99.0', '6to4'], ['192.88.99.255', '6to4'], ['192.88.100.0', null]]);
  });

  t.test('192.168.0.0/16 is private', async (t) => {
    classifies(t, [['192.167.255.255', null], ['192.168.0.0', 'private'], ['192.168.255.255', 'private'], ['192.169.0.0', null]]);
  });

  t.test('198.18.0.0/15 is benchmarking', async (t) => {
    classifies(t, [['198.17.255.255', null], ['198.18.0.0', 'benchmarking'], ['198.19.255.255', 'benchmarking'], ['198.20.0.0', null]]);
  });

  t.test('198.51.100.0/24 is documentation', async (t) => {
    classifies(t, [['198.51.99.255', null], ['198.51.100.0', 'documentation'], ['198.51.100.255', 'documentation'], ['198.51.101.0', null]]);
  });

  t.test('203.0.113.0/24 is documentation', async (t) => {
    classifies(t, [['203.0.112.255', null], ['203.0.113.0', 'documentation'], ['203.0.113.255', 'documentation'], ['203.0.114.0', null]]);
  });

  t.test('224.0.0.0/4 is multicast', async (t) => {
    classifies(t, [['223.255.255.255', null], ['224.0.0.0', 'multicast'], ['239.255.255.255', 'multicast']]);
  });

  t.test('240.0.0.0/4 is reserved and 255.255.255.255 is broadcast', async (t) => {
    classifies(t, [['239.255.255.255', 'multicast'], ['240.0.0.0', 'reserved'], ['255.255.255.254', 'reserved'], ['255.255.255.255', 'broadcast']]);
  });

  t.test('::/128 is unspecified', async (t) => {
    classifies(t, [['::', 'unspecified'], ['0:0:0:0:0:0:0:0', 'unspecified'], ['::0.0.0.0', 'unspecified']]);
  });

  t.test('::1/128 is loopback', async (t) => {
    classifies(t, [['::1', 'loopback'], ['0:0:0:0:0:0:0:1', 'loopback'], ['0000:0000::0001', 'loopback'], ['::0.0.0.1', 'loopback'], ['::2', 'reserved']]);
  });

  t.test('::ffff:0:0/96 (IPv4-mapped) is classified by its embedded IPv4 address', async (t) => {
    classifies(t, [
      ['::ffff:127.0.0.2', 'loopback'],
      ['::ffff:7f00:2', 'loopback'],
      ['::FFFF:7F00:0002', 'loopback'],
      ['0:0:0:0:0:ffff:127.0.0.2', 'loopback'],
      ['::ffff:10.0.0.1', 'private'],
      ['::ffff:169.254.169.254', 'link-local'],
      ['::ffff:a9fe:a9fe', 'link-local'],
      ['::ffff:0.0.0.0', 'unspecified'],
      ['::ffff:255.255.255.255', 'broadcast'],
      ['::ffff:8.8.8.8', null],
      ['::ffff:808:808', null],
      // neighbours of the mapped block are not public unicast either
      ['::fffe:ffff:ffff', 'reserved'],
      ['::1:0:0:0', 'reserved'],
    ]);
  });

  t.test('::/96 (IPv4-compatible, deprecated) is reserved', async (t) => {
    classifies(t, [['::8.8.8.8', 'reserved'], ['::808:808', 'reserved'], ['::255.255.255.255', 'reserved'], ['::127.0.0.1', 'reserved']]);
  });

  t.test('64:ff9b::/96 and 64:ff9b:1::/48 are nat64', async (t) => {
    classifies(t, [
      ['64:ff9b::', 'nat64'],
      ['64:ff9b::8.8.8.8', 'nat64'],
      ['64:ff9b::ffff:ffff', 'nat64'],
      ['64:FF9B::127.0.0.1', 'nat64'],
      ['64:ff9b::1:0:0', 'reserved'],
      ['64:ff9b:1::', 'nat64'],
      ['64:ff9b:1:ffff:ffff:ffff:ffff:ffff', 'nat64'],
      ['64:ff9b:2::', 'reserved'],
    ]);
  });

  t.test('100::/64 (discard-only) is reserved', async (t) => {
    classifies(t, [['100::', 'reserved'], ['100::ffff:ffff:ffff:ffff', 'reserved']]);
  });

  t.test('2001::/32 is teredo', async (t) => {
    classifies(t, [['2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff', null], ['2001::', 'teredo'], ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'teredo'], ['2001:0:ffff:ffff:ffff:ffff:ffff:ffff', 'teredo'], ['2001:1::', 'reserved']]);
  });

  t.test('2001:2::/48 is benchmarking', async (t) => {
    classifies(t, [['2001:2::', 'benchmarking'], ['2001:2:0:ffff:ffff:ffff:ffff:ffff', 'benchmarking'], ['2001:2:1::', 'reserved']]);
  });

  t.test('2001::/23 (IETF protocol assignments) is reserved', async (t) => {
    classifies(t, [['2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff', 'reserved'], ['2001:200::', null]]);
  });

  t.test('2001:db8::/32 is documentation', async (t) => {
    classifies(t, [['2001:db7:ffff:ffff:ffff:ffff:ffff:ffff', null], ['2001:db8::', 'documentation'], ['2001:DB8:ffff:ffff:ffff:ffff:ffff:ffff', 'documentation'], ['2001:db9::', null]]);
  });

  t.test('2002::/16 is 6to4', async (t) => {
    classifies(t, [['2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff', null], ['2002::', '6to4'], ['2002:7f00:1::', '6to4'], ['2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '6to4'], ['2003::', null]]);
  });

  t.test('3fff::/20 is documentation', async (t) => {
    classifies(t, [['3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff', null], ['3fff::', 'documentation'], ['3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff', 'documentation'], ['3fff:1000::', null]]);
  });

  t.test('fc00::/7 is unique-local', async (t) => {
    classifies(t, [['fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'reserved'], ['fc00::', 'unique-local'], ['fd12:3456:789a::1', 'unique-local'], ['fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'unique-local'], ['fe00::', 'reserved']]);
  });

  t.test('fe80::/10 is link-local', async (t) => {
    classifies(t, [['fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'reserved'], ['fe80::', 'link-local'], ['FE80::1', 'link-local'], ['febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'link-local'], ['fec0::', 'reserved']]);
  });

  t.test('ff00::/8 is multicast', async (t) => {
    classifies(t, [['feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'reserved'], ['ff00::', 'multicast'], ['ff02::1', 'multicast'], ['ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'multicast']]);
  });

  t.test('outside 2000::/3 (global unicast) everything else is reserved', async (t) => {
    classifies(t, [['1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'reserved'], ['2000::', null], ['3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', null], ['4000::', 'reserved'], ['5f00::1', 'reserved'], ['::1:2:3:4:5', 'reserved']]);
  });

  // An independent reference: Node's BlockList over the same ranges. It
  // applies IPv4 rules to IPv4-mapped IPv6 addresses itself.
  const reference = new BlockList();
  for (const [network, bits] of [
    ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16],
    ['172.16.0.0', 12], ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.88.99.0', 24], ['192.168.0.0', 16],
    ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24], ['224.0.0.0', 4], ['240.0.0.0', 4],
  ] as const) {
    reference.addSubnet(network, bits, 'ipv4');
  }
  const referenceV6 = new BlockList();
  for (const [network, bits] of [
    ['64:ff9b::', 96], ['64:ff9b:1::', 48], ['2001::', 23], ['2001:db8::', 32], ['2002::', 16],
    ['3fff::', 20], ['::', 3], ['4000::', 2], ['8000::', 1],
  ] as const) {
    referenceV6.addSubnet(network, bits, 'ipv6');
  }
  const mapped = new BlockList();
  mapped.addSubnet('::ffff:0:0', 96, 'ipv6');

  const groupsOf = (bytes: Uint8Array): number[] =>
    Array.from({ length: 8 }, (_, i) => (bytes[i * 2]! << 8) | bytes[i * 2 + 1]!);
  const prefixed = fc
    .tuple(
      fc.constantFrom([0, 0, 0, 0, 0, 0xffff], [0x64, 0xff9b, 0, 0, 0, 0], [0x64, 0xff9b, 1], [0x2001, 0], [0x2001, 0xdb8], [0x2002], [0xfe80], [0xfc00], [0xff02], [0, 0, 0, 0, 0, 0], [0x3fff]),
      fc.uint8Array({ minLength: 16, maxLength: 16 }),
    )
    .map(([head, random]) => {
      const bytes = Uint8Array.from(random);
      head.forEach((group, i) => {
        bytes[i * 2] = group >> 8;
        bytes[i * 2 + 1] = group & 0xff;
      });
      return bytes;
    });
  const anyAddress = fc.oneof(fc.uint8Array({ minLength: 16, maxLength: 16 }), prefixed);

  t.test('every textual IPv6 form of one address is classified alike, and as BlockList does', async (t) => {
    fc.assert(
      fc.property(anyAddress, (bytes) => {
        const groups = groupsOf(bytes);
        const full = groups.map((g) => g.toString(16)).join(':');
        const padded = groups.map((g) => g.toString(16).padStart(4, '0').toUpperCase()).join(':');
        const compressed = new URL(`http://[${full}]/`).hostname.slice(1, -1);
        const dotted = `${groups.slice(0, 6).map((g) => g.toString(16)).join(':')}:${bytes.slice(12).join('.')}`;
        const reason = classifyAddress(full);
        for (const form of [padded, compressed, compressed.toUpperCase(), dotted]) {
          if (classifyAddress(form) !== reason) throw new Error(`${form} → ${classifyAddress(form)}, ${full} → ${reason}`);
        }
        const refused = mapped.check(full, 'ipv6') ? reference.check(full, 'ipv6') : referenceV6.check(full, 'ipv6');
        if ((reason !== null) !== refused) throw new Error(`${full}: ${reason} but BlockList says refused=${refused}`);
      }),
      { numRuns: 5000 },
    );
    t.pass('5000 addresses agree');
  });

  t.test('an IPv4 address and its IPv4-mapped forms are classified alike, and as BlockList does', async (t) => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 4, maxLength: 4 }), (bytes) => {
        const v4 = bytes.join('.');
        const reason = classifyAddress(v4);
        const hex = `${((bytes[0]! << 8) | bytes[1]!).toString(16)}:${((bytes[2]! << 8) | bytes[3]!).toString(16)}`;
        for (const form of [`::ffff:${v4}`, `::FFFF:${hex}`, `0:0:0:0:0:ffff:${hex}`]) {
          if (classifyAddress(form) !== reason) throw new Error(`${form} → ${classifyAddress(form)}, ${v4} → ${reason}`);
        }
        if ((reason !== null) !== reference.check(v4, 'ipv4')) throw new Error(`${v4}: ${reason} disagrees with BlockList`);
      }),
      { numRuns: 5000 },
    );
    t.pass('5000 addresses agree');
  });

  t.test('every 32-bit number, in decimal or hex, normalizes to the dotted quad classified the same', async (t) => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), (n) => {
        const quad = [n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff].join('.');
        for (const form of [String(n), `0x${n.toString(16)}`]) {
          const hostname = parseTarget(`${form}/x`)?.hostname;
          if (hostname !== quad) throw new Error(`${form} → ${hostname}, expected ${quad}`);
        }
      }),
      { numRuns: 2000 },
    );
    t.pass('2000 numbers agree');
  });
});

t.test('createAllowList', async (t) => {
  t.test('a hostname entry allows exactly that host, case-insensitively', async (t) => {
    const allow = createAllowList(['api.internal']);
    t.equal(allow.allowsHost('api.internal'), true);
    t.equal(allow.allowsHost('API.Internal'), true);
    t.equal(allow.allowsHost('api.internal.'), true, 'trailing dot');
    t.equal(allow.allowsHost('x.api.internal'), false, 'a subdomain is not the host');
    t.equal(allow.allowsHost('api.internal.evil.example'), false);
    t.equal(allow.allowsHost('internal'), false);
  });

  t.test('a hostname entry with a trailing dot names the same host', async (t) => {
    const allow = createAllowList(['api.internal.']);
    t.equal(allow.allowsHost('api.internal'), true);
  });

  t.test('an IPv6 hostname is compared without its brackets', async (t) => {
    const allow = createAllowList(['*.internal']);
    t.equal(allow.allowsHost('[::1]'), false);
    t.equal(allow.allowsHost('[A.INTERNAL]'), true);
  });

  t.test('a *.suffix entry allows every name below the suffix, not the suffix itself', async (t) => {
    const allow = createAllowList(['*.corp.example']);
    t.equal(allow.allowsHost('a.corp.example'), true);
    t.equal(allow.allowsHost('a.b.corp.example'), true);
    t.equal(allow.allowsHost('A.CORP.EXAMPLE'), true);
    t.equal(allow.allowsHost('corp.example'), false);
    t.equal(allow.allowsHost('evilcorp.example'), false);
    t.equal(allow.allowsHost('corp.example.evil'), false);
  });

  t.test('a hostname entry allows no address', async (t) => {
    const allow = createAllowList(['localhost']);
    t.equal(allow.allowsHost('localhost'), true);
    t.equal(allow.allowsAddress('127.0.0.1'), false);
  });

  t.test('an IP entry allows that address, not its neighbours, and no host by name', async (t) => {
    const allow = createAllowList(['127.0.0.1']);
    t.equal(allow.allowsAddress('127.0.0.1'), true);
    t.equal(allow.allowsAddress('127.0.0.2'), false);
    t.equal(allow.allowsAddress('127.0.0.0'), false);
    t.equal(allow.allowsHost('127.0.0.1'), false);
  });

  t.test('an IPv4 entry also matches its IPv4-mapped IPv6 form', async (t) => {
    const allow = createAllowList(['127.0.0.1']);
    t.equal(allow.allowsAddress('::ffff:127.0.0.1'), true);
    t.equal(allow.allowsAddress('::ffff:7f00:1'), true);
    t.equal(allow.allowsAddress('::FFFF:7F00:0001'), true);
    t.equal(allow.allowsAddress('::127.0.0.1'), false, 'IPv4-compatible is another address');
    t.equal(allow.allowsAddress('64:ff9b::127.0.0.1'), false, 'NAT64 is another address');
  });

  t.test('an IPv4-mapped IPv6 entry also matches the plain IPv4 address', async (t) => {
    const allow = createAllowList(['::ffff:127.0.0.1']);
    t.equal(allow.allowsAddress('127.0.0.1'), true);
  });

  t.test('an IPv6 entry matches every spelling of that address', async (t) => {
    const allow = createAllowList(['::1']);
    t.equal(allow.allowsAddress('::1'), true);
    t.equal(allow.allowsAddress('0:0:0:0:0:0:0:1'), true);
    t.equal(allow.allowsAddress('::2'), false);
    t.equal(allow.allowsAddress('127.0.0.1'), false);
  });

  t.test('an IPv4 CIDR entry allows its range and the mapped range', async (t) => {
    const allow = createAllowList(['10.0.0.0/8', '127.0.0.1/32']);
    t.equal(allow.allowsAddress('10.0.0.0'), true);
    t.equal(allow.allowsAddress('10.255.255.255'), true);
    t.equal(allow.allowsAddress('::ffff:10.1.2.3'), true);
    t.equal(allow.allowsAddress('9.255.255.255'), false);
    t.equal(allow.allowsAddress('11.0.0.0'), false);
    t.equal(allow.allowsAddress('127.0.0.1'), true);
    t.equal(allow.allowsAddress('127.0.0.2'), false);
  });

  t.test('a CIDR with a prefix length that is not a multiple of 8 matches bit by bit', async (t) => {
    const allow = createAllowList(['172.16.0.0/12', 'fe80::/10']);
    t.equal(allow.allowsAddress('172.15.255.255'), false);
    t.equal(allow.allowsAddress('172.16.0.0'), true);
    t.equal(allow.allowsAddress('172.31.255.255'), true);
    t.equal(allow.allowsAddress('172.32.0.0'), false);
    t.equal(allow.allowsAddress('febf::1'), true);
    t.equal(allow.allowsAddress('fec0::1'), false);
  });

  t.test('an IPv6 CIDR entry allows its range', async (t) => {
    const allow = createAllowList(['::1/128', 'fd00:1234::/32']);
    t.equal(allow.allowsAddress('::1'), true);
    t.equal(allow.allowsAddress('::2'), false);
    t.equal(allow.allowsAddress('fd00:1234::1'), true);
    t.equal(allow.allowsAddress('FD00:1234:FFFF::1'), true);
    t.equal(allow.allowsAddress('fd00:1235::1'), false);
  });

  t.test('a /0 entry allows every address of its family and the mapped ones', async (t) => {
    const v4 = createAllowList(['0.0.0.0/0']);
    t.equal(v4.allowsAddress('8.8.8.8'), true);
    t.equal(v4.allowsAddress('::ffff:8.8.8.8'), true);
    t.equal(v4.allowsAddress('::1'), false);
  });

  t.test('an address that is not an IP literal is never allowed', async (t) => {
    const allow = createAllowList(['0.0.0.0/0', '::/0']);
    t.equal(allow.allowsAddress('localhost'), false);
    t.equal(allow.allowsAddress('127.1'), false);
    t.equal(allow.allowsAddress('fe80::1%eth0'), false);
  });

  t.test('an empty list allows nothing', async (t) => {
    const allow = createAllowList([]);
    t.equal(allow.allowsHost('localhost'), false);
    t.equal(allow.allowsAddress('127.0.0.1'), false);
  });

  t.test('a malformed entry throws, naming the entry', async (t) => {
    const malformed: ReadonlyArray<readonly [string, RegExp]> = [
      ['', /empty entry/],
      ['   ', /empty entry/],
      ['10.0.0.0/33', /"10\.0\.0\.0\/33".*prefix length must be 0–32/],
      ['::1/129', /prefix length must be 0–128/],
      ['10.0.0.0/', /prefix length/],
      ['10.0.0.0/x', /prefix length/],
      ['10.0.0.0/-1', /prefix length/],
      ['10.0.0.1/8', /"10\.0\.0\.1\/8" has bits set after the prefix length/],
      ['fe80::1/10', /bits set after the prefix length/],
      ['300.0.0.0/8', /not a valid IP/],
      ['localhost/8', /not a valid IP/],
      ['127.1', /"127\.1" is neither a hostname nor a dotted-quad IPv4/],
      ['2130706433', /neither a hostname nor a dotted-quad/],
      ['0x7f.0.0.1', /neither a hostname nor a dotted-quad/],
      ['api.example.com:8443', /port/],
      ['bad host', /"bad host" is not a valid hostname/],
      ['a..b', /not a valid hostname/],
      ['*.', /not a valid hostname/],
      ['*', /not a valid hostname/],
      ['a.*.example', /not a valid hostname/],
      ['user@host', /not a valid hostname/],
      ['fe80::1%eth0', /"fe80::1%eth0" is not a valid IP address/],
    ];
    for (const [entry, message] of malformed) {
      t.throws(() => createAllowList(['127.0.0.1', entry]), message, JSON.stringify(entry));
    }
  });
});

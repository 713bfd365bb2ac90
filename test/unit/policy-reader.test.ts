// Large policies are read by a worker thread (policy-reader.ts): what it hands
// back compiles to the very policy parsePolicy compiles, a bad text is refused
// with the same first problem, and the event loop no longer waits for the yaml
// library's parse.
import { serialize } from 'node:v8';
import t from 'tap';
import { GuardError } from '../../shared/errors.js';
import { evaluatePolicy, evaluateShadow, matchingLimits, parsePolicy, POLICY_LIMITS, STORED_POLICY_LIMITS } from '../../shared/policy/index.js';
import type { CompiledPolicy, PolicyLimits } from '../../shared/policy/index.js';
import { forgetCompiledPolicies, packPolicyForm, readPolicy } from '../../shared/policy/parse-policy.js';
import { compilePolicy, INLINE_POLICY_CHARS, policyReaderState } from '../../shared/policy/policy-reader.js';

/** Rules of every kind, then `filler` more, so the text is read by the worker. */
function largePolicy(filler: number, tag = ''): string {
  const rules = Array.from({ length: filler }, (_, i) => `  - {name: f${i}, tool: "t${i}.example.com", action: GET, path: "/f${i}/*/x/**", decision: deny}`);
  return `version: "1"  # ${tag}
default: deny
rules:
  - name: no-deletes
    tool: "*.github.com"
    action: delete
    path: /repos/**
    decision: deny
    message: &long ${'m'.repeat(300)}
  - {name: held, tool: "api.*.com", action: POST, decision: approve, approval_timeout: 600, message: *long}
  - {name: mcp, tool: "*", action: POST, mcp_method: tools/call, mcp_tool: "*delete*", decision: deny}
  - {name: try, tool: "*", action: "*", path: /admin/**, decision: allow, mode: shadow}
${rules.join('\n')}
  - {name: rest, tool: "*", action: "*", decision: allow}
limits:
  - {name: writes, tool: "*.github.com", action: POST, path: /repos/**, rate: 100/hour, burst: 5}
  - {name: mcp-calls, tool: "*", mcp_method: "tools/*", rate: 10/second}
`;
}

/** The compiled policy as data: its globs' matchers by their kind, its RegExps by their source. */
function shape(policy: CompiledPolicy): string {
  return JSON.stringify(policy, (_key, value: unknown) =>
    typeof value === 'function' ? `function ${value.name}` : value instanceof RegExp ? String(value) : value instanceof Map ? [...value] : value);
}

async function refusal(text: string, limits: PolicyLimits, compile: (text: string, limits: PolicyLimits) => unknown): Promise<string> {
  try {
    await compile(text, limits);
  } catch (err) {
    if (err instanceof GuardError && err.code === 'invalid_policy') return err.message;
    throw err;
  }
  throw new Error('the policy was accepted');
}

/** The longest the event loop waited between turns of a 1 ms timer while `work` ran. */
async function longestWait(work: () => Promise<unknown>): Promise<number> {
  let longest = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  try {
    await work();
  } finally {
    clearInterval(timer);
  }
  return Math.max(longest, performance.now() - last);
}

t.test('a large policy read by the worker compiles to what parsePolicy compiles, under either limits', async (t) => {
  for (const limits of [POLICY_LIMITS, STORED_POLICY_LIMITS]) {
    const text = largePolicy(400, limits === POLICY_LIMITS ? 'strict' : 'stored');
    t.ok(text.length > INLINE_POLICY_CHARS, `${text.length} characters: read by the worker`);
    forgetCompiledPolicies();
    const read = await compilePolicy(text, limits);
    t.ok(policyReaderState().running, 'the worker read it');
    forgetCompiledPolicies();
    const parsed = parsePolicy(text, limits);
    t.equal(shape(read), shape(parsed), 'the same compiled policy, rule for rule');
    t.equal(read.rules.length + read.shadowRules.length, 405);
    const calls: [string, string, string][] = [
      ['api.github.com', 'DELETE', '/repos/a/b'],
      ['api.acme.com', 'POST', '/x'],
      ['t7.example.com', 'GET', '/f7/a/x/b/c'],
      ['t7.example.com', 'GET', '/f7/a/y'],
      ['other.org', 'GET', '/admin/users'],
    ];
    for (const [tool, action, path] of calls) {
      t.strictSame(evaluatePolicy(read, tool, action, path), evaluatePolicy(parsed, tool, action, path), `${action} ${tool}${path}`);
      t.equal(evaluateShadow(read, tool, action, path)?.name, evaluateShadow(parsed, tool, action, path)?.name);
      t.strictSame(matchingLimits(read, tool, action, path).map((l) => l.key), matchingLimits(parsed, tool, action, path).map((l) => l.key));
    }
    t.equal(evaluatePolicy(read, 'api.acme.com', 'POST', '/x').message, 'm'.repeat(300), "an alias's text arrives whole");
  }
});

t.test('a large policy the worker refuses is refused with the first problem parsePolicy names', async (t) => {
  const big = largePolicy(400);
  const cases: [string, string, PolicyLimits][] = [
    ['a problem in the last rule', big.replace('decision: allow}\nlimits', 'decision: alow}\nlimits'), POLICY_LIMITS],
    ['not valid YAML', `${big}  - {name: [\n`, POLICY_LIMITS],
    // A glob refused while compiling (rule 1) comes before a shape problem (rule 300): the first in the text.
    ['a glob problem before a shape problem', big.replace('"*.github.com"', '"*.git*hub.com"').replace('name: f300,', 'nme: f300,'), POLICY_LIMITS],
    ['a duplicate name far down', big.replace('name: f399,', 'name: f1,'), POLICY_LIMITS],
    ['an unknown key at the top level', `${big}extra: 1\n`, POLICY_LIMITS],
    ['an alias to no anchor', big.replace('message: *long', 'message: *nothing'), STORED_POLICY_LIMITS],
    ['too many rules', `version: "1"\nrules:\n${'  - {tool: a, action: GET, decision: deny}\n'.repeat(10_001)}`, POLICY_LIMITS],
  ];
  for (const [what, text, limits] of cases) {
    t.ok(text.length > INLINE_POLICY_CHARS, what);
    forgetCompiledPolicies();
    const parsed = await refusal(text, limits, parsePolicy);
    const read = await refusal(text, limits, compilePolicy);
    t.equal(read, parsed, `${what}: ${parsed.slice(0, 100)}`);
  }

  // Past the bounds a policy being set keeps to, and within those of a stored one.
  const scanning = `version: "1"\nrules:\n${Array.from({ length: 300 }, (_, i) => `  - {tool: "*", action: POST, mcp_tool: "*x${i}*", decision: deny}`).join('\n')}\n`;
  t.ok(scanning.length > INLINE_POLICY_CHARS);
  forgetCompiledPolicies();
  t.match(await refusal(scanning, POLICY_LIMITS, compilePolicy), /at most 256 MCP globs/);
  const stored = await compilePolicy(scanning, STORED_POLICY_LIMITS);
  t.equal(stored.mcpNamesMaxChars, parsePolicy(scanning, STORED_POLICY_LIMITS).mcpNamesMaxChars, 'stored: compiled, its names bound as parsePolicy sets it');
});

t.test('a text nested too deeply is refused as such by the worker too (its stack is the main thread\'s)', async (t) => {
  // With a worker's 4 MB stack the yaml library parsed it, and the walk refused it as "a rule must be a mapping".
  for (const depth of [1_000, 3_000, 20_000]) {
    const text = `version: "1"\nrules: ${'['.repeat(depth)}${']'.repeat(depth)}\n${'#'.repeat(INLINE_POLICY_CHARS)}\n`;
    forgetCompiledPolicies();
    t.match(await refusal(text, POLICY_LIMITS, parsePolicy), /^line 2, column \d+: not valid YAML: the YAML is nested too deeply$/, `${depth} deep, parsed here`);
    t.match(await refusal(text, POLICY_LIMITS, compilePolicy), /^line 2, column \d+: not valid YAML: the YAML is nested too deeply$/, `${depth} deep, read by the worker`);
  }
});

t.test('a text too large to be a policy is refused at once, without a turn in the queue', async (t) => {
  const text = largePolicy(3_000);
  t.ok(text.length > POLICY_LIMITS.maxBytes);
  let queued = 0;
  const message = await refusal(text, POLICY_LIMITS, (yamlText, limits) => compilePolicy(yamlText, limits, (read) => {
    queued++;
    return read();
  }));
  t.match(message, /^the policy is larger than 256 KiB/);
  t.equal(queued, 0);
});

t.test("a text that YAML aliases repeat crosses to the event loop's thread once", async (t) => {
  // 100 rules whose message is one 200 KB text: posted as each rule's string it was 20 MB, and the compiled policy held 100 copies.
  const text = `version: "1"\nrules:\n  - {name: r0, tool: a, action: GET, decision: deny, message: &m ${'x'.repeat(200_000)}}\n${Array.from({ length: 99 }, (_, i) => `  - {name: r${i + 1}, tool: a, action: GET, decision: deny, message: *m}`).join('\n')}\n`;
  const packed = serialize(packPolicyForm(readPolicy(text, POLICY_LIMITS))).length;
  t.ok(packed < 2 * text.length, `what is posted: ${packed} bytes for a text of ${text.length}`);
  forgetCompiledPolicies();
  const policy = await compilePolicy(text);
  t.equal(policy.rules.length, 100);
  t.ok(policy.rules.every((rule) => rule.result.message === 'x'.repeat(200_000)));
});

t.test('the event loop does not wait for the yaml library: a large policy costs it a fraction of parsing it here', async (t) => {
  // 245 KB of 3,000 small rules: the yaml library's worst shape, ~85 % of parsePolicy's time.
  const text = (tag: string) => {
    let yaml = `version: "1"  # ${tag}\nrules:\n`;
    for (let i = 0; yaml.length < 245_000; i++) yaml += `  - {name: r${i}, tool: "t${i}.example.com", action: GET, decision: allow}\n`;
    return yaml;
  };
  await compilePolicy(text('warm the worker'));
  const here: number[] = [];
  const read: number[] = [];
  for (let round = 0; round < 3; round++) {
    here.push(await longestWait(async () => parsePolicy(text(`here ${round}`))));
    read.push(await longestWait(() => compilePolicy(text(`read ${round}`))));
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[1]!;
  t.ok(median(read) < median(here) / 2, `the longest wait: ${read.map((ms) => ms.toFixed(0)).join(', ')} ms read by the worker, ${here.map((ms) => ms.toFixed(0)).join(', ')} ms parsed here`);
});

t.test('a text asked for twice at once is read once, and both get it', async (t) => {
  const text = largePolicy(300, 'twice');
  forgetCompiledPolicies();
  const reads = policyReaderState().reads;
  const [a, b] = await Promise.all([compilePolicy(text), compilePolicy(text)]);
  t.equal(policyReaderState().reads - reads, 1, 'handed to the worker once');
  t.equal(shape(a), shape(b));
  t.not(a, b, 'each caller has its own tool index');
});

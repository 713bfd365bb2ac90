// wrk (and wrk2, which takes the same script and adds -R <rate>) as a load
// generator: a C client that needs far less CPU than a Node one, which matters
// on 2 cores shared with the proxy and the upstream. Its results are read from
// a Lua done() hook that prints one JSON line (wrk's own text output is for people).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runProcess } from '../processes.js';
import { toResult, type LoadGenerator, type LoadResult, type LoadSpec } from './types.js';

const RESULT_MARK = 'BENCH_JSON ';
let scriptCounter = 0;

/** The Lua script for one run: method, body, random paths (when many), and the JSON report. */
export function wrkScript(spec: LoadSpec, pathsFile: string | null): string {
  const lines = [
    `wrk.method = "${spec.method}"`,
  ];
  if (spec.jsonBody !== undefined) {
    // A Lua long bracket: nothing in the JSON is escaped (it holds no "]==]").
    lines.push(`wrk.body = [==[${spec.jsonBody}]==]`, 'wrk.headers["Content-Type"] = "application/json"');
  } else if (spec.bodyBytes > 0) {
    lines.push(`wrk.body = string.rep("x", ${spec.bodyBytes})`, 'wrk.headers["Content-Type"] = "application/octet-stream"');
  }
  if (pathsFile !== null) {
    lines.push(
      'local paths = {}',
      'init = function(args)',
      // Each wrk thread has its own Lua state: seed each one differently (its table address).
      '  local seed = os.time()',
      '  local address = tostring({}):match("0x(%x+)")',
      '  if address then seed = seed + tonumber(address, 16) % 1000003 end',
      '  math.randomseed(seed)',
      `  for line in io.lines("${pathsFile}") do paths[#paths + 1] = line end`,
      'end',
      'request = function()',
      '  return wrk.format(nil, paths[math.random(#paths)])',
      'end',
    );
  }
  lines.push(
    'done = function(summary, latency, requests)',
    '  local e = summary.errors',
    `  io.write(string.format('${RESULT_MARK}{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,' ..`,
    `    '"connect":%d,"read":%d,"write":%d,"timeout":%d,"status":%d}\\n',`,
    '    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),',
    '    e.connect, e.read, e.write, e.timeout, e.status))',
    'end',
  );
  return lines.join('\n') + '\n';
}

export function parseWrkOutput(stdout: string): LoadResult {
  const line = stdout.split('\n').find((l) => l.startsWith(RESULT_MARK));
  if (line === undefined) throw new Error(`wrk printed no result line; its output:\n${stdout.slice(-2000)}`);
  const r = JSON.parse(line.slice(RESULT_MARK.length)) as Record<string, number>;
  const n = (key: string): number => r[key] ?? 0;
  return toResult(n('requests'), n('duration_us') / 1e6, n('p50_us') / 1000, n('p99_us') / 1000, n('connect') + n('read') + n('write') + n('timeout'), n('status'));
}

export function createWrk(binary: string, options: { threads: number; fixedRate: boolean }): LoadGenerator {
  return {
    name: options.fixedRate ? 'wrk2' : 'wrk',
    async run(spec, workDir) {
      const id = ++scriptCounter;
      let pathsFile: string | null = null;
      if (spec.paths.length > 1) {
        pathsFile = join(workDir, `wrk-paths-${id}.txt`);
        writeFileSync(pathsFile, spec.paths.join('\n') + '\n');
      }
      const script = join(workDir, `wrk-${id}.lua`);
      writeFileSync(script, wrkScript(spec, pathsFile));
      const args = [
        `-t${Math.min(options.threads, spec.connections)}`, `-c${spec.connections}`, `-d${Math.max(1, Math.round(spec.durationSec))}s`,
        '--timeout', '10s', '-s', script,
      ];
      if (options.fixedRate) args.push(`-R${spec.rate ?? 1000}`);
      args.push(`${spec.origin}${spec.paths[0] ?? '/'}`);
      const { code, stdout, stderr } = await runProcess(this.name, binary, args, (spec.durationSec + 30) * 1000);
      if (code !== 0) throw new Error(`${this.name} exited with ${code}: ${stderr.slice(-1000)}`);
      return parseWrkOutput(stdout);
    },
  };
}

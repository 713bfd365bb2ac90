// What the proxy reads from `/proxy/{key}/{target}` (shared/target.ts): the
// target's authority and path, and the path the policy sees.
// `node dist/bench/micro/parse-target.js`.
import { normalizePolicyPath, parseTarget } from '../../shared/target.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

export const measureParseTarget: MicroCases = () => [
  measure('parseTarget (authority cached)', () => parseTarget('127.0.0.1:8443/small?x=1')),
  measure('normalizePolicyPath', () => normalizePolicyPath('/repos/a/b/issues')),
];

runWhenMain(import.meta.url, measureParseTarget);

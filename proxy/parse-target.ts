// Stage: the target the call names, `host[:port]/path`, parsed and normalised by
// the same functions the policy check API uses (shared/target.ts).
import { normalizePolicyPath, parseTarget, REFUSED_PATH_PARTS } from '../shared/target.js';
import type { Stage } from './exchange.js';

export function createParseTarget(): Stage {
  return (ex) => {
    const target = parseTarget(ex.rawTarget);
    if (target === null) return ex.answerError('invalid_target');
    ex.target = target;
    const policyPath = normalizePolicyPath(target.path);
    if (policyPath === null) return ex.answerError('invalid_target', `The target path has ${REFUSED_PATH_PARTS}, which the proxy does not forward.`);
    ex.policyPath = policyPath;
    return undefined;
  };
}

// Stage: the target the call names, `host[:port]/path`, parsed and normalised by
// the same functions the policy check API uses (shared/target.ts); and a call
// whose method an override header would change upstream, refused.
import { normalizePolicyPath, parseTarget, REFUSED_PATH_PARTS } from '../shared/target.js';
import type { Stage } from './exchange.js';

export function createParseTarget(): Stage {
  return (ex) => {
    // The policy decides on the method the agent sent; an upstream that honours
    // a method override (Google's APIs, Rails, Laravel) would run another one:
    // a POST the rules allow, with X-HTTP-Method-Override: DELETE, deleting.
    if (ex.methodOverride !== null) return ex.answerError('invalid_request', `The proxy does not forward ${ex.methodOverride}: the policy decides on the request's method, so send that method itself.`);
    const target = parseTarget(ex.rawTarget);
    if (target === null) return ex.answerError('invalid_target');
    ex.target = target;
    const policyPath = normalizePolicyPath(target.path);
    if (policyPath === null) return ex.answerError('invalid_target', `The target path has ${REFUSED_PATH_PARTS}, which the proxy does not forward.`);
    ex.policyPath = policyPath;
    return undefined;
  };
}

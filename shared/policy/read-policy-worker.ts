// The worker thread that reads large policies (policy-reader.ts starts it): the
// yaml library's parse and every check, so they never hold up the event loop
// that serves calls. It hands back the policy's plain form, or its first problem
// (a GuardError's message and code).
import { answerCalls } from '../worker-calls.js';
import { packPolicyForm, POLICY_LIMITS, readPolicy, STORED_POLICY_LIMITS } from './parse-policy.js';

answerCalls(({ yamlText, stored }: { yamlText: string; stored: boolean }) => packPolicyForm(readPolicy(yamlText, stored ? STORED_POLICY_LIMITS : POLICY_LIMITS)));

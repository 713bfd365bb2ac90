// The worker thread that reads large policies (policy-reader.ts starts it): the
// yaml library's parse and every check, so they never hold up the event loop
// that serves calls. It hands back the policy's plain form, or its first problem.
import { parentPort } from 'node:worker_threads';
import { GuardError } from '../errors.js';
import { packPolicyForm, POLICY_LIMITS, readPolicy, STORED_POLICY_LIMITS } from './parse-policy.js';

parentPort!.on('message', ({ id, yamlText, stored }: { id: number; yamlText: string; stored: boolean }) => {
  try {
    parentPort!.postMessage({ id, form: packPolicyForm(readPolicy(yamlText, stored ? STORED_POLICY_LIMITS : POLICY_LIMITS)) });
  } catch (err) {
    if (err instanceof GuardError && err.code === 'invalid_policy') parentPort!.postMessage({ id, invalid: err.message });
    else parentPort!.postMessage({ id, fault: err instanceof Error ? err.message : String(err) });
  }
});

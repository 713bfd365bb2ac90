// RateLimiter.decide (proxy/rate-limiter.ts): every call of an agent whose
// policy has `limits`. `node dist/bench/micro/rate-limiter.js`.
import { randomUUID } from 'node:crypto';
import { parsePolicy } from '../../shared/policy/index.js';
import { RateLimiter } from '../../proxy/rate-limiter.js';
import { proxyRecord } from './audit-records.js';
import { measure, runWhenMain, type MicroCases } from './measure.js';

/** The compiled `limits` of a rule-less policy, one per [name, tool glob, rate]. */
function limitsOf(...limits: [string, string, string][]) {
  const yaml = limits.map(([name, tool, rate]) => `  - name: ${name}\n    tool: "${tool}"\n    rate: ${rate}\n`).join('');
  return parsePolicy(`version: "1"\nrules: []\nlimits:\n${yaml}`).limits;
}

export const measureRateLimiter: MicroCases = () => {
  const agentId = proxyRecord.agentId;
  // Rates the run cannot use up, so that every call is admitted (and counted), except under used-up.
  const warmLimits = limitsOf(['warm', '*', '1000000000/second']);
  const usedUpLimits = limitsOf(['used-up', '*', '1/hour']);
  const fiveLimits = limitsOf(
    ...['a', 'b', 'c', 'd'].map((h): [string, string, string] => [h, `${h}.example.com`, '1000000000/second']),
    ['bench', '127.0.0.1', '1000000000/second'],
  );
  const manyLimits = limitsOf(['many', '*', '1000000/minute']);
  const warmLimiter = new RateLimiter({ maxCounters: 10 });
  const usedUpLimiter = new RateLimiter({ maxCounters: 10 });
  usedUpLimiter.decide(agentId, usedUpLimits, '127.0.0.1', 'GET', '/small'); // the hour's one call
  const fiveLimiter = new RateLimiter({ maxCounters: 10 });
  const manyLimiter = new RateLimiter({ maxCounters: 200_000 });
  const agentIds = Array.from({ length: 100_000 }, () => randomUUID());
  return [
    measure('RateLimiter.decide (warm counter, admitted)', () =>
      warmLimiter.decide(agentId, warmLimits, '127.0.0.1', 'GET', '/small'),
    ),
    measure('RateLimiter.decide (refused: 1/hour used up)', () =>
      usedUpLimiter.decide(agentId, usedUpLimits, '127.0.0.1', 'GET', '/small'),
    ),
    measure('RateLimiter.decide (5 limits, 1 matches)', () =>
      fiveLimiter.decide(agentId, fiveLimits, '127.0.0.1', 'GET', '/small'),
    ),
    measure('RateLimiter.decide (next of 100,000 agents each call)', (i) =>
      manyLimiter.decide(agentIds[i % agentIds.length]!, manyLimits, '127.0.0.1', 'GET', '/small'),
    ),
  ];
};

runWhenMain(import.meta.url, measureRateLimiter);

// Every scenario, in the order a run measures them.
import type { Scenario } from '../scenario.js';
import { auditHash } from './audit-hash.js';
import { auditShare } from './audit-share.js';
import { download } from './download.js';
import { fixedRate } from './fixed-rate.js';
import { get64k } from './get-64k.js';
import { manyAgents } from './many-agents.js';
import { mcpInspect } from './mcp-inspect.js';
import { observability } from './observability.js';
import { policyDenied } from './policy-denied.js';
import { post16k } from './post-16k.js';
import { smallGet } from './small-get.js';
import { sse } from './sse.js';

export const SCENARIOS: readonly Scenario[] = [smallGet, get64k, post16k, sse, policyDenied, auditHash, mcpInspect, observability, manyAgents, auditShare, download, fixedRate];

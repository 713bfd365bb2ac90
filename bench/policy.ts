// The policy every bench agent runs under.
import { DENIED_PATH } from './routes.js';

/** The policy of the main org's agents: deny one path, allow the rest of the upstream, deny anything else. */
export const BENCH_POLICY = `version: "1"
default: deny
rules:
  - name: no-admin
    tool: "127.0.0.1"
    action: "*"
    path: "${DENIED_PATH.slice(0, DENIED_PATH.indexOf('/', 1))}/**"
    decision: deny
    message: The bench policy keeps agents out of /admin.
  - name: bench-upstream
    tool: "127.0.0.1"
    action: "*"
    decision: allow
`;

/** BENCH_POLICY plus a rule on the JSON-RPC tool: the proxy must read every body to decide. */
export const MCP_BENCH_POLICY = BENCH_POLICY.replace('rules:\n', `rules:
  - name: no-destructive
    tool: "127.0.0.1"
    action: POST
    mcp_method: tools/call
    mcp_tool: "delete_*"
    decision: deny
`);

// The records both processes share. Field names follow the contract's JSON.

export type LogOutputs = 'full' | 'hash' | 'none';
export const LOG_OUTPUTS: readonly LogOutputs[] = ['full', 'hash', 'none'];

export type CredType = 'bearer' | 'header' | 'query';
export const CRED_TYPES: readonly CredType[] = ['bearer', 'header', 'query'];

export interface User {
  id: string;
  orgId: string;
  email: string;
  passwordHash: string;
  createdAt: string;
}

export interface Agent {
  id: string;
  orgId: string;
  name: string;
  apiKeyPrefix: string;
  logOutputs: LogOutputs;
  createdAt: string;
}

export interface Credential {
  id: string;
  orgId: string;
  name: string;
  hostname: string;
  credType: CredType;
  headerName: string | null;
  queryParam: string | null;
  createdAt: string;
}

/** A credential with its sealed (AES-256-GCM) value, as the store holds it. */
export interface SealedCredential extends Credential {
  sealedValue: string;
}

export interface PolicyRecord {
  agentId: string;
  rulesYaml: string;
  updatedAt: string;
}

export type AuditDecision = 'allowed' | 'denied';
export type AuditSource = 'proxy' | 'api';

/** One audit row, as written to and read from the audit store. */
export interface AuditRecord {
  id: string;
  timestamp: string; // ISO 8601 UTC with milliseconds
  /**
   * The same instant in epoch milliseconds (Date.parse(timestamp), exactly),
   * when whoever made the record had it as a number (the proxy): the seal's
   * sort needs it, and parsing costs.
   */
  timestampMs?: number;
  orgId: string;
  agentId: string;
  agentName: string;
  toolName: string;
  action: string;
  toolUrl: string;
  decision: AuditDecision;
  reasoning: string;
  taskId: string;
  latencyMs: number;
  statusCode: number;
  ruleMatched: string;
  source: AuditSource;
  requestBytes: number;
  responseBytes: number;
  outputHash: string | null;
  output: string | null;
  outputTruncated: boolean;
  requestId: string;
  /** Mcp-Session-Id of the request, else of the response; null when neither has one. */
  mcpSessionId: string | null;
  /** The JSON-RPC request the policy inspected (a batch: its first denied element, else its first); null when not inspected or not JSON-RPC. */
  mcpMethod: string | null;
  mcpTool: string | null;
  /** The first matching `mode: shadow` rule and its decision (rule vocabulary); null when none matched. */
  shadowRule: string | null;
  shadowDecision: 'allow' | 'deny' | 'approve' | null;
  /** The target path as the policy matched it (normalised, no query); '' when the policy did not run. */
  policyPath: string;
  /** The policy gave the final decision (policy replay re-evaluates these only). */
  policyDecided: boolean;
  /** The approval a held call was forwarded, denied or refused under; null otherwise. */
  approvalId: string | null;
  /**
   * Read back from the store: the entry_hash written with the row (null for a row
   * written before entries were hashed). Absent on a record not yet written: the
   * hash is computed from it (shared/audit/entry-json.ts).
   */
  entryHash?: string | null;
  /** Read back from the store: the batch whose seal covers the row (null when none). Not part of the entry's JSON. */
  batchId?: string | null;
}

/**
 * The record fields only a proxied call fills in (the MCP session and request,
 * the shadow rule, what policy replay reads), as an entry that is not one has
 * them: POST /audit, and records made for tests.
 */
export const NO_PROXY_DETAIL = Object.freeze({
  mcpSessionId: null,
  mcpMethod: null,
  mcpTool: null,
  shadowRule: null,
  shadowDecision: null,
  policyPath: '',
  policyDecided: false,
  approvalId: null,
} as const satisfies Partial<AuditRecord>);

/**
 * The filters of GET /audit that are an exact match on a string column, as
 * [AuditFilter field, column]: the query parameter has the column's name.
 */
export const AUDIT_EXACT_FILTERS = [
  ['toolName', 'tool_name'],
  ['taskId', 'task_id'],
  ['mcpSessionId', 'mcp_session_id'],
  ['mcpMethod', 'mcp_method'],
  ['mcpTool', 'mcp_tool'],
  ['approvalId', 'approval_id'],
] as const satisfies readonly (readonly [keyof AuditFilter, string])[];

export interface AuditFilter {
  agentId?: string;
  approvalId?: string;
  mcpSessionId?: string;
  mcpMethod?: string;
  mcpTool?: string;
  decision?: AuditDecision;
  toolName?: string;
  taskId?: string;
  since?: string;
  until?: string;
}

/** An approval's status as the API reports it; `expired` is computed from expires_at, never stored. */
export type ApprovalStatus = 'pending' | 'approved' | 'denied' | 'expired' | 'used';
export const APPROVAL_STATUSES: readonly ApprovalStatus[] = ['pending', 'approved', 'denied', 'expired', 'used'];

/** A held call waiting for, or past, a person's decision (CONTRACT.md "Held calls"). */
export interface Approval {
  id: string;
  orgId: string;
  agentId: string;
  agentName: string;
  /** The target hostname (the policy's tool). */
  toolName: string;
  /** The HTTP method. */
  action: string;
  /** The target authority as the agent wrote it (host[:port]): the retry must name the same. */
  host: string;
  /** The target path as the agent wrote it, without the query. */
  path: string;
  /** The raw query ('' when none). */
  query: string;
  reasoning: string;
  taskId: string;
  ruleMatched: string;
  status: ApprovalStatus;
  createdAt: string;
  expiresAt: string;
  decidedAt: string | null;
  /** The deciding user's email. */
  decidedBy: string | null;
  note: string | null;
  /** Lowercase hex SHA-256 of the held body (of '' when none). */
  bodySha256: string;
  bodyBytes: number;
}

/** What the metadata store tells caches when something they may hold changed. */
export type MetadataChange =
  | { kind: 'agent'; agentId: string; keyHash: string }
  | { kind: 'policy'; agentId: string }
  | { kind: 'credential'; orgId: string; hostname: string }
  /** A person decided an approval: a proxy holding its call reads it again. */
  | { kind: 'approval'; orgId: string; approvalId: string };

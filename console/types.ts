// The admin API's shapes the console reads (docs/api.md).

export interface Agent {
  id: string;
  name: string;
  api_key_prefix: string;
  log_outputs: 'full' | 'hash' | 'none';
  created_at: string;
  proxy_url?: string;
  api_key?: string;
}

export interface Credential {
  id: string;
  name: string;
  hostname: string;
  cred_type: 'bearer' | 'header' | 'query';
  header_name?: string;
  query_param?: string;
  created_at: string;
}

export interface AuditEntry {
  id: string;
  timestamp: string;
  agent_id: string;
  agent_name: string;
  tool_name: string;
  action: string;
  tool_url: string;
  decision: 'allowed' | 'denied';
  reasoning: string;
  task_id: string;
  latency_ms: number;
  status_code: number;
  rule_matched: string;
  source: 'proxy' | 'api';
  output: string | null;
  output_hash: string | null;
  [field: string]: unknown;
}

/** GET /audit/summary. */
export interface AuditSummary {
  since: string;
  until: string;
  calls: number;
  denied: number;
  agents_total: number;
  agents: { agent_id: string; agent_name: string; calls: number; denied: number; p95_latency_ms: number }[];
}

export interface Approval {
  id: string;
  agent_id: string;
  agent_name: string;
  tool_name: string;
  host: string;
  action: string;
  path: string;
  query: string;
  reasoning: string;
  task_id: string;
  rule_matched: string;
  status: 'pending' | 'approved' | 'denied' | 'expired' | 'used';
  created_at: string;
  expires_at: string;
  decided_at: string | null;
  decided_by: string | null;
  note: string | null;
}

export interface Replay {
  total: number;
  unchanged: number;
  allow_to_deny: number;
  deny_to_allow: number;
  samples: { audit_id: string; timestamp: string; tool_name: string; action: string; path: string; decision: string; would_decision: string; would_rule: string }[];
}

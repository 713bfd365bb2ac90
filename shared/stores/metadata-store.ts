// The metadata store: users, orgs, agents, credentials, policies. Implemented over
// SQLite (shared/stores/sqlite/) and MongoDB (shared/stores/mongo/); both pass
// test/integration/metadata-store.contract.ts.
import type { Agent, CredType, Credential, LogOutputs, MetadataChange, PolicyRecord, SealedCredential, User } from '../types.js';

export interface NewAgent {
  orgId: string;
  name: string;
  logOutputs: LogOutputs;
  keyHash: string; // hex SHA-256 of the full API key
  apiKeyPrefix: string;
}

export interface NewCredential {
  orgId: string;
  name: string;
  hostname: string;
  credType: CredType;
  headerName: string | null;
  queryParam: string | null;
  sealedValue: string;
}

export interface MetadataStore {
  /** Creates an org owned by a new user. Throws GuardError('conflict') when the email is taken. */
  createUserWithOrg(email: string, passwordHash: string): Promise<User>;
  findUserByEmail(email: string): Promise<User | undefined>;
  findUserById(id: string): Promise<User | undefined>;

  createAgent(agent: NewAgent): Promise<Agent>;
  /** The org's agents, oldest first. */
  listAgents(orgId: string): Promise<Agent[]>;
  /** undefined when the id is unknown or belongs to another org. */
  getAgent(orgId: string, agentId: string): Promise<Agent | undefined>;
  /** The hot path's key lookup (on a cache miss). */
  findAgentByKeyHash(keyHash: string): Promise<Agent | undefined>;
  /** Deletes the agent and its policy; false when not found in that org. */
  deleteAgent(orgId: string, agentId: string): Promise<boolean>;

  /** Throws GuardError('conflict') when the org already has a credential for the hostname. */
  createCredential(credential: NewCredential): Promise<Credential>;
  listCredentials(orgId: string): Promise<Credential[]>;
  deleteCredential(orgId: string, credentialId: string): Promise<boolean>;
  /** The credential the proxy injects for (org, hostname[:port]), with its sealed value. */
  findCredentialForHost(orgId: string, hostname: string): Promise<SealedCredential | undefined>;

  getPolicy(agentId: string): Promise<PolicyRecord | undefined>;
  setPolicy(agentId: string, rulesYaml: string): Promise<PolicyRecord>;

  /** Subscribe to changes that invalidate cached agents, policies or credentials. Returns an unsubscribe. */
  onChange(listener: (change: MetadataChange) => void): () => void;

  /** Cheap round-trip used by readiness checks. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

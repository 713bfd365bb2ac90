// One registry of every error the service answers with: code → status → default
// message. Everything thrown on purpose is a GuardError; `toErrorBody` turns it into
// the contract's shape `{"error", "message", ...extra}` in one place.

export const ERRORS = {
  invalid_request: { status: 400, message: 'The request is malformed.' },
  invalid_policy: { status: 400, message: 'The policy is not valid.' },
  invalid_target: { status: 400, message: 'The proxy path does not name a valid target host.' },
  unauthorized: { status: 401, message: 'A valid bearer token is required.' },
  invalid_credentials: { status: 401, message: 'The email or password is wrong.' },
  invalid_api_key: { status: 401, message: 'The agent API key is unknown or revoked.' },
  policy_denied: { status: 403, message: 'The agent policy denies this call.' },
  target_forbidden: { status: 403, message: 'The target address is not allowed.' },
  approval_denied: { status: 403, message: 'A person denied this call.' },
  approval_expired: { status: 403, message: 'The approval expired before the call was forwarded.' },
  not_found: { status: 404, message: 'Not found.' },
  method_not_allowed: { status: 405, message: 'The method is not allowed here.' },
  conflict: { status: 409, message: 'The resource already exists.' },
  approval_used: { status: 409, message: 'The approval was already used for its call.' },
  approval_mismatch: { status: 409, message: 'The call differs from the one the approval is for.' },
  payload_too_large: { status: 413, message: 'The request body is too large.' },
  uri_too_long: { status: 414, message: 'The request URL is too long.' },
  unsupported_media_type: { status: 415, message: 'The body must be JSON (Content-Type: application/json).' },
  rate_limited: { status: 429, message: 'Too many requests; retry later.' },
  headers_too_large: { status: 431, message: 'The request headers are too large.' },
  internal: { status: 500, message: 'An internal error occurred.' },
  upstream_unreachable: { status: 502, message: 'The target could not be reached.' },
  unavailable: { status: 503, message: 'A backing store is unavailable; retry later.' },
  upstream_timeout: { status: 504, message: 'The target did not answer in time.' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERRORS;

export class GuardError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly extra: Record<string, unknown> | undefined;
  /** Response headers that go with this error (e.g. Retry-After, Allow). */
  readonly headers: Record<string, string> | undefined;

  constructor(code: ErrorCode, message?: string, extra?: Record<string, unknown>, headers?: Record<string, string>) {
    super(message ?? ERRORS[code].message);
    this.name = 'GuardError';
    this.code = code;
    this.status = ERRORS[code].status;
    this.extra = extra;
    this.headers = headers;
  }
}

export function errorBody(code: ErrorCode, message?: string, extra?: Record<string, unknown>): string {
  return JSON.stringify({ error: code, message: message ?? ERRORS[code].message, ...extra });
}

/** Any thrown value → status and body. Unknown errors become 500 `internal` with no detail. */
export function toErrorResponse(err: unknown): { status: number; body: string; headers: Record<string, string> | undefined } {
  if (err instanceof GuardError) {
    return { status: err.status, body: errorBody(err.code, err.message, err.extra), headers: err.headers };
  }
  return { status: 500, body: errorBody('internal'), headers: undefined };
}

/**
 * A backing store cannot be reached (503 `unavailable`), as opposed to a bug (500).
 * Each driver throws it at its own boundary, telling by its error codes and classes
 * which failures mean "unreachable", so nothing above a driver inspects driver
 * errors. The driver's error is the `cause`.
 */
export class StoreUnavailableError extends Error {
  readonly code = 'STORE_UNAVAILABLE';

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'StoreUnavailableError';
  }
}

export function isStoreUnavailable(err: unknown): err is StoreUnavailableError {
  return err instanceof StoreUnavailableError;
}

// The console's only way to the service: same-origin fetch of the admin API with
// `Authorization: Bearer`, exactly as curl calls it. The token lives in
// sessionStorage (gone with the tab, never in a URL or a cookie).

const TOKEN_KEY = 'tcg.token';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value: string | null): void {
  if (value === null) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, value);
}

export function authHeaders(): Record<string, string> {
  const t = token();
  return t === null ? {} : { authorization: `Bearer ${t}` };
}

/** Called when the token is refused (expired): the app goes back to the login page. */
let onUnauthorized: () => void = () => {};
export function whenUnauthorized(callback: () => void): void {
  onUnauthorized = callback;
}

/** A status the service answered a request of the console's own (the stream, a download) with: a 401 is a refused token, as in `call`. */
export function answered(status: number): void {
  if (status === 401 && token() !== null) onUnauthorized();
}

/** The service ended a stream because its token expired: back to the login page, as for a refused one. */
export function expired(): void {
  if (token() !== null) onUnauthorized();
}

export interface Answer<T> {
  data: T;
  headers: Headers;
}

export async function call<T>(method: string, path: string, body?: unknown): Promise<Answer<T>> {
  const headers: Record<string, string> = { ...authHeaders() };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  let data: unknown = null;
  try {
    data = text.length > 0 ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!res.ok) {
    const err = (data ?? {}) as { error?: string; message?: string; field?: string };
    if (res.status === 401 && token() !== null) onUnauthorized();
    throw new ApiError(res.status, err.error ?? 'error', err.message ?? `${res.status} ${res.statusText}`, err.field);
  }
  return { data: data as T, headers: res.headers };
}

export const get = <T>(path: string) => call<T>('GET', path).then((a) => a.data);
export const post = <T>(path: string, body: unknown) => call<T>('POST', path, body).then((a) => a.data);
export const remove = (path: string) => call<null>('DELETE', path).then(() => undefined);

/** A message for the person, from any thrown value. */
export function problem(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  return err instanceof Error ? err.message : String(err);
}

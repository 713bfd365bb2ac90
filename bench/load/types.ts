// What a load generator is asked to do, and what it reports.

export interface LoadSpec {
  /** `http(s)://127.0.0.1:<port>` */
  origin: string;
  /** One path, or many drawn at random for every request (e.g. 10,000 agent keys). */
  paths: readonly string[];
  method: 'GET' | 'POST';
  /** Request body size for POST (bytes of 'x'), 0 for none. */
  bodyBytes: number;
  /** A JSON body sent instead of the 'x' bytes (Content-Type: application/json). */
  jsonBody?: string;
  connections: number;
  durationSec: number;
  /** Fixed rate over all connections (requests/s); only the fixed-rate generators (wrk2, open-loop) honour it. */
  rate?: number;
}

export interface LoadResult {
  /** Responses received within the run (not the ones still in flight when it stopped). */
  requests: number;
  durationSec: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** The fixed-rate generators' 99.9th percentile. */
  p999Ms?: number;
  /** Connect, read, write and timeout errors. */
  errors: number;
  /** Responses with an error status (wrk: >= 400; autocannon: not 2xx). */
  badStatus: number;
}

export interface LoadGenerator {
  name: 'wrk' | 'wrk2' | 'autocannon' | 'open-loop';
  /** Runs one load; `workDir` is where it may write scripts. */
  run(spec: LoadSpec, workDir: string): Promise<LoadResult>;
}

export function toResult(requests: number, durationSec: number, p50Ms: number, p99Ms: number, errors: number, badStatus: number): LoadResult {
  return { requests, durationSec, rps: durationSec > 0 ? requests / durationSec : 0, p50Ms, p99Ms, errors, badStatus };
}

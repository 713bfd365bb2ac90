// The part of autocannon's programmatic API the bench uses (the package ships no types).
declare module 'autocannon' {
  interface Histogram {
    p50: number;
    p99: number;
    total: number;
  }
  interface Options {
    url: string;
    method?: string;
    connections?: number;
    duration?: number;
    timeout?: number;
    body?: string | Buffer;
    headers?: Record<string, string>;
    requests?: { setupRequest?: (request: Record<string, unknown>) => Record<string, unknown> }[];
  }
  interface Result {
    requests: Histogram;
    latency: Histogram;
    duration: number;
    errors: number;
    timeouts: number;
    non2xx: number;
  }
  function autocannon(options: Options): Promise<Result>;
  export default autocannon;
}

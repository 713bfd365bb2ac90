// The node flags a split-mode proxy process starts with: `npm run start:proxy`
// (package.json), docker-compose.yml's proxies and the bench spell them out, and
// test/unit/node-flags.test.ts checks that they agree with this list.
//
// `--max-semi-space-size=4`: V8's young generation at most 2 × 4 MiB instead of
// 2 × 16. A proxy allocates fast and V8 grows the nursery to its maximum; what
// dies young dies as well in 4 MiB (the calls in flight are what a scavenge
// keeps, ~60 under the bench's load), and each scavenge is shorter. Measured on
// the split proxy (5 interleaved starts each, 5 s of wrk -c64 per workload,
// docs/performance.md "The split proxy's memory"): peak RSS 172–209 MiB →
// 170–180, CPU a call within the noise (small GET median 203 → 189 µs, 64 KiB
// 369 → 378, 16 KiB POST 204 → 209). V8 reads it when it makes the heap, so it
// cannot be set from inside the process.
export const PROXY_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4'];

// The node flags and the environment a split-mode proxy process starts with:
// `npm run start:proxy` (package.json) and docker-compose.yml's proxies spell
// them out, the bench and the tests' proxies take them from here, and
// test/unit/node-flags.test.ts checks that they agree.
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

// `MALLOC_MMAP_THRESHOLD_=131072`: glibc's malloc serves every block of 128 KiB
// or more with its own mmap, returned to the system when freed, and trims the
// top of its heaps past 128 KiB of free space. By default it raises both
// thresholds each time it frees a large mapped block (up to 32 MiB), and the
// proxy's large buffers then come from heaps it keeps at their peak. Read by
// glibc as the process starts (other C libraries ignore it), so it too cannot
// be set from inside. Measured on the split proxy in the bench (5 s of each
// load and the 1 GiB download a run, runs with and without interleaved;
// docs/performance.md "The split proxy's memory"): peak RSS 152.7 and 162.8 MiB
// without, 142.8–149.7 with (six runs), CPU a call within the run-to-run noise.
export const PROXY_ENV: Readonly<Record<string, string>> = { MALLOC_MMAP_THRESHOLD_: '131072' };

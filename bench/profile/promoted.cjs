// What a process keeps past its scavenges, by allocation site: a sampling heap
// profile that keeps the objects full GCs collect (V8's
// includeObjectsCollectedByMajorGC) and drops those scavenges collect, so what
// it counts is what was promoted (then collected by a full GC, or still alive).
// Preloaded into the split proxy by bench/profile/promoted.mjs; writes
// PROMOTED_OUT (a .heapprofile) after PROMOTED_STOP_MS, sampling from
// PROMOTED_START_MS. docs/performance.md, "The audit batch off the V8 heap".
'use strict';
const inspector = require('node:inspector');
const { writeFileSync } = require('node:fs');

if (process.env.PROMOTED_OUT && process.argv[1] && process.argv[1].includes('main-proxy')) {
  const session = new inspector.Session();
  session.connect();
  session.post('HeapProfiler.enable');
  setTimeout(() => {
    session.post('HeapProfiler.startSampling', { samplingInterval: 2048, includeObjectsCollectedByMajorGC: true });
  }, Number(process.env.PROMOTED_START_MS)).unref();
  setTimeout(() => {
    session.post('HeapProfiler.stopSampling', (err, result) => {
      if (err) console.error('promoted.cjs:', err.message);
      else writeFileSync(process.env.PROMOTED_OUT, JSON.stringify(result.profile));
    });
  }, Number(process.env.PROMOTED_STOP_MS)).unref();
}

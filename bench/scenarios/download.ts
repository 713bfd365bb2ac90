// One big download (1 GiB; quick: 256 MiB) through each comparator while the
// proxy's resident memory is sampled every 100 ms: a proxy that streams with
// back-pressure stays flat; one that buffers grows with the body.
import { COMPARATOR_LABELS, runningComparators, targetOf } from '../measure.js';
import { rssMiB } from '../proc-stats.js';
import { DOWNLOAD_PATH } from '../routes.js';
import type { Sample, Scenario } from '../scenario.js';

const SAMPLE_EVERY_MS = 100;

export const download: Scenario = {
  id: 'download',
  title: 'Big download, memory of the proxy',
  about: 'One large streamed response (Content-Length known) read by a client as fast as it can: throughput, and how far the proxy\'s RSS rises above its level just before the download (sampled every 100 ms).',
  columns: [
    { key: 'mibps', label: 'MiB/s', digits: 0, better: 'higher', ratio: true },
    { key: 'seconds', label: 'seconds', digits: 2, better: 'lower' },
    { key: 'rssBefore', label: 'RSS before MiB', digits: 1, better: 'lower' },
    { key: 'rssGrowth', label: 'RSS growth MiB', digits: 1, better: 'lower' },
    { key: 'errors', label: 'errors', digits: 0, better: 'lower' },
  ],
  headline: 'mibps',
  subject: 'guard',
  rounds: () => 1,
  variants: (ctx) => runningComparators(ctx).map((name) => ({
    name,
    label: COMPARATOR_LABELS[name],
    async measure(c): Promise<Sample> {
      const target = targetOf(c, name);
      const bytes = c.options.downloadBytes;
      const url = `${target.origin}${target.pathFor(`${DOWNLOAD_PATH}?bytes=${bytes}`, c.keys.none)}`;
      const pid = target.proc?.pid ?? null;
      const before = pid !== null ? rssMiB(pid) : null;
      let peak = before ?? 0;
      const sampler = pid !== null
        ? setInterval(() => {
          const now = rssMiB(pid);
          if (now !== null && now > peak) peak = now;
        }, SAMPLE_EVERY_MS)
        : null;
      try {
        const ex = await c.http.exchange(url, { timeoutMs: 30_000 });
        if (name === 'guard') c.guardCalls.completed += 1;
        const ok = ex.status === 200 && ex.bytes === bytes;
        return {
          mibps: ok ? bytes / 1024 ** 2 / (ex.totalMs / 1000) : null,
          seconds: ex.totalMs / 1000,
          rssBefore: before,
          rssGrowth: before !== null ? peak - before : null,
          errors: ok ? 0 : 1,
        };
      } finally {
        if (sampler !== null) clearInterval(sampler);
      }
    },
  })),
};

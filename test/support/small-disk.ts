// A small tmpfs of its own for a test to fill (root and CAP_SYS_ADMIN, as on the
// CI machine), unmounted when the test file ends; `skip` holds the reason when
// it cannot be mounted, for tap's `{ skip }`.
import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';

export interface SmallDisk {
  dir: string;
  /** false when mounted, else why not. */
  skip: string | false;
}

export function mountSmallDisk(t: Test, name: string): SmallDisk {
  const dir = mkdtempSync(join(tmpdir(), `tcg-${name}-`));
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir], { encoding: 'utf8' });
  const skip = mounted.status !== 0 && `cannot mount a small tmpfs to fill (${(mounted.stderr || mounted.error?.message || '').trim()})`;
  t.teardown(() => {
    if (skip === false) spawnSync('umount', [dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  return { dir, skip };
}

/** Takes every free block of the disk with `file` (ENOSPC ends it). */
export function fillDisk(file: string): void {
  const fd = openSync(file, 'w');
  try {
    for (;;) writeSync(fd, Buffer.alloc(4096, 'f'));
  } catch {
    // ENOSPC: full
  } finally {
    closeSync(fd);
  }
}

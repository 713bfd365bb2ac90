// Whether a process id names a running process: the lock of a spool directory
// and the insert files of the embedded ClickHouse are a process's own while it runs.

/** True while `pid` runs (signal 0 delivered, or refused for want of permission: it exists). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

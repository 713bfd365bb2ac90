// A wait for a condition that other processes or timers make true, shared by every
// test (its own module so that a unit test need not load the service to use it).

/** Polls until `check` returns a value other than undefined, or fails after `ms`. */
export async function eventually<T>(check: () => Promise<T | undefined>, ms = 5000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

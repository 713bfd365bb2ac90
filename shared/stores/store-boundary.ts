// Where a driver's errors become the service's: each driver names, by its own error
// codes and classes, the failures that mean its store could not be reached, and
// those leave it as StoreUnavailableError (503). Every other error leaves unchanged,
// so a bug still reads as the driver reported it.
import { StoreUnavailableError } from '../errors.js';

/** Turns an error into a StoreUnavailableError when `unreachable` says so, else returns it as it is. */
export type ErrorClassifier = (err: unknown) => unknown;

export function unreachableClassifier(storeName: string, unreachable: (err: unknown) => boolean): ErrorClassifier {
  return (err) => {
    if (err instanceof StoreUnavailableError || !unreachable(err)) return err;
    const reason = err instanceof Error ? err.message : String(err);
    return new StoreUnavailableError(`The ${storeName} cannot be reached: ${reason}`, { cause: err });
  };
}

/**
 * `target` with every method's throw or rejection passed through `classify`. A method
 * that returns synchronously still does (SQLite's work is synchronous and its callers
 * may rely on it); a promise is classified when it rejects. Methods named in `pure`
 * touch no store (an encoder run per proxied call) and are returned bound to the
 * store, unwrapped: the wrapper's rest array, apply and promise check cost more
 * than their work.
 */
export function guardBoundary<T extends object>(target: T, classify: ErrorClassifier, pure: readonly (keyof T)[] = []): T {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(target, {
    get(object, key) {
      const value: unknown = Reflect.get(object, key, object);
      if (typeof value !== 'function') return value;
      let method = wrapped.get(key);
      if (method === undefined && pure.includes(key as keyof T)) {
        // Bound to the store itself, as the wrapper calls it: a method reading a #private field works either way.
        method = (value as (...a: unknown[]) => unknown).bind(object);
        wrapped.set(key, method);
      } else if (method === undefined) {
        method = (...args: unknown[]): unknown => {
          let result: unknown;
          try {
            result = (value as (...a: unknown[]) => unknown).apply(object, args);
          } catch (err) {
            throw classify(err);
          }
          return result instanceof Promise
            ? result.catch((err: unknown) => {
                throw classify(err);
              })
            : result;
        };
        wrapped.set(key, method);
      }
      return method;
    },
  });
}

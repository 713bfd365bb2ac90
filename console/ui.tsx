// Small shared pieces: an error line, a time, a copy button. Every value from an
// agent is rendered as a text child (preact escapes it); nothing is ever set as HTML.
import { useState } from 'preact/hooks';

export function ErrorLine({ message }: { message: string | null }) {
  if (message === null) return null;
  return <p class="error" role="alert">{message}</p>;
}

export function Time({ iso }: { iso: string | null }) {
  if (iso === null) return <span>—</span>;
  return <time dateTime={iso} title={iso}>{new Date(iso).toLocaleString()}</time>;
}

export function CopyButton({ text, label }: { text: string; label: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      onClick={() => {
        void navigator.clipboard?.writeText(text).then(() => setDone(true), () => setDone(false));
      }}
    >
      {done ? 'Copied' : label}
    </button>
  );
}

/** Runs an async action, keeping its error for display. */
export function useAction(): [string | null, (action: () => Promise<void>) => Promise<void>] {
  const [error, setError] = useState<string | null>(null);
  const run = async (action: () => Promise<void>) => {
    setError(null);
    try {
      await action();
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };
  return [error, run];
}

// Renders audit PDFs off the event loop: one worker thread (pdf-worker.ts),
// started on the first report and kept, that takes one report at a time in the
// order asked. pdfkit and its font metrics load only there, only when needed.
import { Worker } from 'node:worker_threads';
import type { AuditPdfInput } from './audit-pdf.js';

interface Pending {
  resolve: (pdf: Buffer) => void;
  reject: (err: Error) => void;
}

export interface PdfRenderer {
  render(input: AuditPdfInput): Promise<Buffer>;
  close(): Promise<void>;
}

export function createPdfRenderer(): PdfRenderer {
  let worker: Worker | null = null;
  let nextId = 0;
  const pending = new Map<number, Pending>();

  function failAll(err: Error): void {
    for (const p of pending.values()) p.reject(err);
    pending.clear();
    worker = null;
  }

  function start(): Worker {
    // From the sources (tests run TypeScript) or from dist/ (npm start); the loader comes with execArgv.
    const file = import.meta.url.endsWith('.ts') ? './pdf-worker.ts' : './pdf-worker.js';
    const w = new Worker(new URL(file, import.meta.url));
    w.on('message', (message: { id: number; pdf?: Uint8Array; error?: string }) => {
      const p = pending.get(message.id);
      if (p === undefined) return;
      pending.delete(message.id);
      if (message.pdf !== undefined) p.resolve(Buffer.from(message.pdf.buffer, message.pdf.byteOffset, message.pdf.byteLength));
      else p.reject(new Error(message.error ?? 'the PDF could not be rendered'));
      if (pending.size === 0) w.unref(); // an idle worker keeps no process alive
    });
    w.on('error', (err) => failAll(err));
    w.on('exit', (code) => failAll(new Error(`the PDF worker exited (${code})`)));
    return w;
  }

  return {
    render(input) {
      worker ??= start();
      worker.ref();
      const id = nextId++;
      const done = new Promise<Buffer>((resolve, reject) => pending.set(id, { resolve, reject }));
      worker.postMessage({ id, input });
      return done;
    },
    async close() {
      const w = worker;
      worker = null;
      if (w !== null) await w.terminate();
    },
  };
}

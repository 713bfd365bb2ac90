// Renders audit PDFs off the event loop: one worker thread (pdf-worker.ts),
// started on the first report and kept, that takes one report at a time in the
// order asked. pdfkit and its font metrics load only there, only when needed.
import { WorkerCalls } from '../../shared/worker-calls.js';
import type { AuditPdfInput } from './audit-pdf.js';

export interface PdfRenderer {
  render(input: AuditPdfInput): Promise<Buffer>;
  close(): Promise<void>;
}

export function createPdfRenderer(): PdfRenderer {
  // From the sources (tests run TypeScript) or from dist/ (npm start); the loader comes with execArgv.
  const worker = new WorkerCalls<AuditPdfInput, Uint8Array>(new URL(import.meta.url.endsWith('.ts') ? './pdf-worker.ts' : './pdf-worker.js', import.meta.url));
  return {
    async render(input) {
      const pdf = await worker.call(input);
      return Buffer.from(pdf.buffer, pdf.byteOffset, pdf.byteLength);
    },
    close: () => worker.close(),
  };
}

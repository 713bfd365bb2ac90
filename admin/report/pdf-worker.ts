// The worker thread that renders audit PDFs (pdf-renderer.ts starts it), so a
// report of thousands of rows never holds up the event loop that serves calls.
import { parentPort } from 'node:worker_threads';
import { renderAuditPdf, type AuditPdfInput } from './audit-pdf.js';

parentPort!.on('message', (message: { id: number; input: AuditPdfInput }) => {
  renderAuditPdf(message.input).then(
    (pdf) => parentPort!.postMessage({ id: message.id, pdf }, [pdf.buffer as ArrayBuffer]),
    (err: unknown) => parentPort!.postMessage({ id: message.id, error: err instanceof Error ? err.message : String(err) }),
  );
});

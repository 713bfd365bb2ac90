// The worker thread that renders audit PDFs (pdf-renderer.ts starts it), so a
// report of thousands of rows never holds up the event loop that serves calls.
import { answerCalls } from '../../shared/worker-calls.js';
import { renderAuditPdf, type AuditPdfInput } from './audit-pdf.js';

answerCalls<AuditPdfInput, Buffer>(renderAuditPdf, (pdf) => [pdf.buffer as ArrayBuffer]);

// pdf-parse v1 ships no types. Tests import lib/pdf-parse.js directly: the
// package's index.js reads a bundled sample PDF when it thinks it runs as main.
declare module 'pdf-parse/lib/pdf-parse.js' {
  interface PdfTextItem {
    str: string;
    /** [a, b, c, d, x, y]; y is the baseline, from the bottom of the page. */
    transform: number[];
    /** The run's advance, in page units. */
    width: number;
  }
  interface PdfPageData {
    getTextContent(options?: { normalizeWhitespace?: boolean; disableCombineTextItems?: boolean }): Promise<{
      items: PdfTextItem[];
    }>;
  }
  interface PdfParseOptions {
    pagerender?: (pageData: PdfPageData) => Promise<string>;
    max?: number;
  }
  interface PdfParseResult {
    numpages: number;
    numrender: number;
    info: Record<string, unknown> | null;
    text: string;
  }
  function pdfParse(data: Uint8Array, options?: PdfParseOptions): Promise<PdfParseResult>;
  export default pdfParse;
}

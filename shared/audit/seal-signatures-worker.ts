// The worker thread that checks seals' signatures (seal-signatures.ts starts
// it), so that a verification's ~120 µs a seal never holds the event loop.
import { answerCalls } from '../worker-calls.js';
import { checkBatch } from './seal-signatures.js';

answerCalls(checkBatch, (found) => [found.buffer]);

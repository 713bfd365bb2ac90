// `npm run start:proxy`: a split-mode proxy process (run any number; they may share a port).
import { runMain } from './run-main.js';

await runMain('proxy');

// `npm run start:proxy`: a split-mode proxy process (run any number; they may share a port).
import { runMain } from '../service.js';

await runMain('proxy');

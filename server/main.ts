// `npm start`: the all-in-one service (proxy, admin API and embedded stores in one process).
import { runMain } from './run-main.js';

await runMain('all-in-one');

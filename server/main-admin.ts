// `npm run start:admin`: the split-mode admin process. Reach it only from the proxies:
// it trusts their X-Forwarded-For for the client address.
import { runMain } from './run-main.js';

await runMain('admin');

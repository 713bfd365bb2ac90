// Preloaded with `--import` into a spawned process: appends the file URL of every
// module the process loads to the file named by MODULE_LOG, one a line. Lets a
// test see which of the service's modules a role loads.
import { appendFileSync } from 'node:fs';
import { register } from 'node:module';

const log = process.env.MODULE_LOG;
if (log) {
  register('data:text/javascript,' + encodeURIComponent(`
    import { appendFileSync } from 'node:fs';
    export async function load(url, context, next) {
      if (url.startsWith('file:')) appendFileSync(${JSON.stringify(log)}, url + '\\n');
      return next(url, context);
    }`));
  appendFileSync(log, '');
}

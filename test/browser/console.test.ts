// The operator console in a real Chromium (playwright-core driving Debian's
// chromium): sign up, create an agent (key shown once), set a policy with an
// error (its line marked) then a fix, make proxied calls and watch them arrive
// in the live tail, approve a held call, download the PDF. An XSS canary in
// X-Agent-Reasoning is shown as text and runs nothing. The CSP and framing
// headers are checked on the page and its assets. A screenshot of each page
// goes to test-artifacts/console/ (gitignored), at 1280 and 390 px wide.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { buildConsole } from '../../scripts/build-console.js';
import { startTestService, tokenExpiringIn } from '../support/service.js';
import { startUpstream } from '../support/upstream.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) => existsSync(p));
const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/console/', import.meta.url));
const XSS = '<img src=x onerror="window.__xss=1">';
/** The test service's signing key: a test makes a token that expires in seconds (JWT_TTL_SECONDS is at least 60). */
const JWT_SECRET = 'console-test-jwt-secret-0123456789abcdef0123456789';

if (CHROMIUM === undefined) {
  const why = 'no Chromium found at /usr/bin/chromium (install Debian\'s chromium: apt-get install -y chromium; .ci/run does it)';
  console.log(`# console browser tests skipped: ${why}`);
  t.test('the console in a real browser', { skip: why }, () => {});
} else {
  await runBrowserTests(CHROMIUM);
}

async function runBrowserTests(executablePath: string): Promise<void> {
  const { chromium } = await import('playwright-core');
  await buildConsole(); // the service reads dist/console at start
  mkdirSync(ARTIFACTS, { recursive: true });
  const upstream = await startUpstream({
    // A tool's answer that tries to act as the console's origin: read the
    // console's token, and claim a service worker over the whole origin.
    '/steal.html': (_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end('<script>document.title = "stolen:" + sessionStorage.getItem("tcg.token");'
        + 'navigator.serviceWorker.register("sw.js", { scope: "/" }).then(() => { document.title += " worker"; });</script>');
    },
    // A script an agent could host on any tool and fetch through the proxy: this origin's URL.
    '/pwn.js': (_req, res) => {
      res.setHeader('content-type', 'text/javascript');
      res.end('window.__pwned = sessionStorage.getItem("tcg.token");');
    },
    '/sw.js': (_req, res) => {
      res.setHeader('content-type', 'text/javascript');
      res.setHeader('service-worker-allowed', '/');
      res.end('self.addEventListener("fetch", () => {});');
    },
  });
  const service = await startTestService({ APPROVAL_HOLD_S: '20', JWT_SECRET });
  const base = service.url;
  const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
  const page = await context.newPage();
  const pageErrors: string[] = [];
  const cspViolations: string[] = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  page.on('console', (msg) => {
    if (/Content Security Policy/i.test(msg.text())) cspViolations.push(msg.text());
  });
  t.teardown(async () => {
    await browser.close();
    await service.close();
    await upstream.close();
  });
  const shot = (name: string) => page.screenshot({ path: `${ARTIFACTS}${name}.png`, fullPage: true });

  t.test('the page and its assets carry the CSP, no framing, nosniff and their cache headers', async (t) => {
    const res = await fetch(`${base}/console`);
    t.equal(res.status, 200);
    const csp = res.headers.get('content-security-policy') ?? '';
    const nonce = /script-src 'nonce-([A-Za-z0-9+/=]{24})'/.exec(csp)?.[1];
    t.ok(nonce, "script-src is the load's nonce alone, not 'self' (/proxy/* is this origin too)");
    for (const directive of ["default-src 'none'", `style-src 'nonce-${nonce}'`, "frame-ancestors 'none'", "base-uri 'none'", "connect-src 'self'"]) {
      t.ok(csp.includes(directive), directive);
    }
    t.notMatch(csp, /unsafe-inline|unsafe-eval|script-src[^;]*'self'|style-src[^;]*'self'/, "nothing inline, no eval, no script or style for being 'self'");
    t.equal(res.headers.get('x-frame-options'), 'DENY');
    t.equal(res.headers.get('x-content-type-options'), 'nosniff');
    t.equal(res.headers.get('referrer-policy'), 'no-referrer');
    t.equal(res.headers.get('cache-control'), 'no-store', 'the index is not stored (a new nonce each load)');
    const html = await res.text();
    t.notMatch(html, /<script>|<style|style=/, 'no inline script or style in the page');
    t.ok(html.includes(`<script nonce="${nonce}" type="module" src="/console/app-`) && html.includes(`<link nonce="${nonce}" rel="stylesheet"`), 'the page\'s script and stylesheet carry the nonce');
    const other = await fetch(`${base}/console`);
    await other.text();
    t.not(/'nonce-([^']+)'/.exec(other.headers.get('content-security-policy') ?? '')?.[1], nonce, 'another load, another nonce');
    const script = /src="(\/console\/app-[A-Z0-9]{8}\.js)"/.exec(html)?.[1];
    t.ok(script, 'the script is a hashed file of this origin');
    const asset = await fetch(`${base}${script}`);
    t.equal(asset.status, 200);
    t.equal(asset.headers.get('cache-control'), 'public, max-age=31536000, immutable');
    t.match(asset.headers.get('content-type'), /javascript/);
    t.equal(asset.headers.get('x-frame-options'), 'DENY');
    const etag = asset.headers.get('etag')!;
    const again = await fetch(`${base}${script}`, { headers: { 'if-none-match': etag } });
    t.equal(again.status, 304, 'ETag revalidation of an asset');
    const deep = await fetch(`${base}/console/anything/else`);
    t.equal(deep.status, 200, 'an unknown /console path is the app');
    t.notOk(/https?:\/\/(?!www\.w3\.org)/.test(readFileSync(`${fileURLToPath(new URL('../../dist/console/', import.meta.url))}index.html`, 'utf8')), 'no CDN in the page');
  });

  let apiKey = '';
  t.test('sign up, then create an agent: its key is shown once', async (t) => {
    await page.goto(`${base}/console`);
    await page.getByRole('button', { name: 'No account? Sign up' }).click();
    await page.getByLabel('Email').fill(`console-${Date.now()}@example.com`);
    await page.getByLabel('Password').fill('correct horse battery');
    await shot('login');
    await page.getByRole('button', { name: 'Sign up', exact: true }).click();
    await page.getByRole('heading', { name: 'Overview, last 24 h' }).waitFor();
    t.notOk(page.url().includes('token') || page.url().includes('eyJ'), 'no token in the URL');
    t.ok(await page.evaluate(() => sessionStorage.getItem('tcg.token')?.startsWith('eyJ')), 'the token is in sessionStorage');
    await page.getByRole('link', { name: 'Agents' }).click();
    await page.getByLabel('Name', { exact: true }).fill('console-agent');
    await page.getByRole('button', { name: 'Create agent' }).click();
    apiKey = (await page.getByTestId('api-key').textContent()) ?? '';
    t.match(apiKey, /^agk_[A-Za-z0-9]{40}$/, 'the full key is shown');
    await shot('agents');
    await page.getByRole('button', { name: 'Hide' }).click();
    await page.reload();
    await page.getByRole('cell', { name: 'console-agent', exact: true }).waitFor();
    t.notOk((await page.content()).includes(apiKey), 'and never again');
  });

  t.test('a policy with an error points at its line; the fix saves', async (t) => {
    await page.getByRole('link', { name: 'Policy' }).first().click();
    const editor = page.getByLabel('Policy (YAML)');
    await editor.waitFor(); // shown once the stored policy is loaded
    const broken = 'version: "1"\ndefault: allow\nrules:\n  - name: hold-posts\n    tool: "*"\n    action: POST\n    decison: approve\n';
    await editor.fill(broken);
    await page.getByRole('button', { name: 'Save policy' }).click();
    const alert = page.locator('#policy-error');
    await alert.waitFor();
    t.match(await alert.textContent(), /line 7/i, 'the message names line 7');
    t.match(await alert.textContent(), /decison/, 'and the typo');
    t.equal(await page.locator('.gutter li.bad').textContent(), '7', 'line 7 is marked in the gutter');
    t.equal(await editor.evaluate((el: HTMLTextAreaElement) => el.value.slice(el.selectionStart, el.selectionEnd)), '    decison: approve', 'and selected in the text');
    await shot('policy-error');
    await editor.fill(broken.replace('decison', 'decision'));
    await page.getByRole('button', { name: 'Save policy' }).click();
    await page.getByRole('status').filter({ hasText: /^saved/ }).waitFor();
    t.equal(await page.locator('#policy-error').count(), 0, 'the error is gone');
    await page.getByLabel('Action').fill('POST');
    await page.getByRole('button', { name: 'Check', exact: true }).click();
    await page.getByText(/approve — /).waitFor();
    t.pass('check a call answers approve for a POST');
    await page.getByRole('button', { name: 'Preview' }).click();
    await page.getByText(/Would have blocked/).waitFor();
    await shot('policy');
  });

  t.test('proxied calls arrive in the live tail, and an XSS canary is only text', async (t) => {
    await page.getByRole('link', { name: 'Audit' }).click();
    await page.getByRole('button', { name: 'Start live tail' }).click();
    await page.getByText('Live: new entries appear').waitFor();
    const res = await fetch(`${base}/proxy/${apiKey}/${upstream.authority}/json`, { headers: { 'x-agent-reasoning': XSS } });
    t.equal(res.status, 200);
    await res.arrayBuffer();
    const row = page.getByTestId('live-tail').getByText(XSS, { exact: true });
    await row.waitFor({ timeout: 5000 });
    t.pass('the call arrived in the live tail');
    await row.click().catch(() => {}); // nothing to click in a cell; the detail opens from the time button
    await page.getByTestId('live-tail').getByRole('button', { name: /Details of the entry/ }).first().click();
    await page.getByRole('dialog').getByText(XSS, { exact: true }).waitFor();
    t.equal(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss), undefined, 'the canary ran nothing');
    t.equal(await page.locator('img[src="x"]').count(), 0, 'no element was made from it');
    await shot('audit-live');
    await page.getByRole('button', { name: 'Close' }).click();
  });

  t.test('a script an agent serves through the proxy (this origin) does not run in the console', async (t) => {
    const src = `/proxy/${apiKey}/${upstream.authority}/pwn.js`;
    const served = await fetch(`${base}${src}`);
    t.equal(served.status, 200, 'the proxy serves it, as any tool answer');
    t.match(served.headers.get('content-type'), /javascript/);
    await served.text();
    const seen = cspViolations.length;
    const loaded = await page.evaluate((url) => new Promise<string>((resolve) => {
      const script = document.createElement('script');
      script.src = url;
      script.onload = () => resolve('loaded');
      script.onerror = () => resolve('refused');
      document.head.append(script);
    }), src);
    t.equal(loaded, 'refused', 'the CSP refuses it');
    t.equal(await page.evaluate(() => (window as unknown as { __pwned?: string }).__pwned), undefined, 'it ran nothing (it would have read the token)');
    t.ok(cspViolations.length > seen, 'reported as a CSP violation');
    cspViolations.length = seen; // expected: the test's own, not the console's
  });

  t.test('a held call is approved from the inbox and goes through', async (t) => {
    const held = fetch(`${base}/proxy/${apiKey}/${upstream.authority}/json`, { method: 'POST', headers: { 'x-agent-reasoning': 'please let me post' } });
    await page.getByRole('link', { name: 'Approvals' }).click();
    await page.getByText('please let me post').waitFor({ timeout: 10_000 });
    t.ok(await page.getByText(`POST ${upstream.authority}/json`).isVisible(), 'the call is shown with the port it is bound to');
    await page.getByLabel('Note').fill('looks fine');
    await shot('approvals');
    await page.getByRole('button', { name: 'Approve' }).click();
    const res = await held;
    t.equal(res.status, 200, 'the held call was forwarded once approved');
    await page.getByRole('cell', { name: 'looks fine' }).waitFor();
    t.pass('the decision is listed with its note');
  });

  t.test('the PDF export downloads a PDF', async (t) => {
    await page.getByRole('link', { name: 'Audit' }).click();
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export PDF' }).click()]);
    t.match(download.suggestedFilename(), /^audit-\d{4}-\d{2}-\d{2}\.pdf$/);
    const path = `${ARTIFACTS}export.pdf`;
    await download.saveAs(path);
    t.equal(readFileSync(path).subarray(0, 5).toString(), '%PDF-');
    await shot('audit');
  });

  t.test('overview and credentials pages; usable at 390 px', async (t) => {
    await page.getByRole('link', { name: 'Credentials' }).click();
    await page.getByLabel('Name', { exact: true }).fill('github');
    await page.getByLabel('Hostname').fill('api.github.com');
    await page.getByLabel('Value').fill('ghp_secret_value_never_shown');
    await page.getByRole('button', { name: 'Add credential' }).click();
    await page.getByRole('cell', { name: 'api.github.com' }).waitFor();
    t.notOk((await page.content()).includes('ghp_secret_value_never_shown') && (await page.getByLabel('Value').inputValue()) === '', 'the value is not shown');
    await shot('credentials');
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.getByRole('cell', { name: 'console-agent', exact: true }).waitFor();
    await shot('overview');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByRole('link', { name: 'Audit' }).click();
    await page.getByRole('button', { name: 'Export PDF' }).waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    t.ok(overflow <= 0, `no sideways scrolling of the page at 390 px (tables scroll in their own box): ${overflow}`);
    await shot('audit-390');
    // Keyboard: the skip link is the first stop and leads to the content.
    await page.reload();
    await page.getByRole('button', { name: 'Export PDF' }).waitFor();
    await page.keyboard.press('Tab');
    t.equal(await page.evaluate(() => document.activeElement?.textContent), 'Skip to content');
  });

  t.test('no script error and no CSP violation on any page', async (t) => {
    t.same(pageErrors, []);
    t.same(cspViolations, []);
  });

  t.test('a live tail whose token expires takes the console back to its login page; so does a refused token', async (t) => {
    // The session's own token, its expiry 12 s away (signed with the test service's JWT_SECRET, as the service signs):
    // time to open the tail on a busy machine; the service accepts a token up to 5 s past its expiry, with a stream of no life.
    const own = (await page.evaluate(() => sessionStorage.getItem('tcg.token')))!;
    const soon = await tokenExpiringIn(own, JWT_SECRET, 12);
    await page.evaluate((value) => sessionStorage.setItem('tcg.token', value), soon);
    await page.getByRole('link', { name: 'Audit' }).click();
    await page.getByRole('button', { name: 'Start live tail' }).click();
    await page.getByText('Live: new entries appear').waitFor();
    await page.getByRole('heading', { name: 'Log in' }).waitFor({ timeout: 20_000 });
    t.equal(await page.evaluate(() => sessionStorage.getItem('tcg.token')), null, 'the expired token is gone');
    // A token the service refuses when the tail opens (the page loaded with a good one).
    await page.evaluate((value) => sessionStorage.setItem('tcg.token', value), own);
    await page.reload(); // signed in again
    await page.getByRole('link', { name: 'Audit' }).click();
    await page.getByRole('button', { name: 'Start live tail' }).waitFor();
    await page.evaluate((value) => sessionStorage.setItem('tcg.token', value), own.slice(0, -4) + 'AAAA');
    await page.getByRole('button', { name: 'Start live tail' }).click();
    await page.getByRole('heading', { name: 'Log in' }).waitFor({ timeout: 5000 });
    t.equal(await page.evaluate(() => sessionStorage.getItem('tcg.token')), null, 'the refused token is gone');
    await page.evaluate((value) => sessionStorage.setItem('tcg.token', value), own); // the session again, for the test after
  });

  // Last: the sandboxed page's blocked script is reported on the console.
  t.test('a tool\'s page opened in the console\'s tab gets neither its token nor a service worker', async (t) => {
    t.ok(await page.evaluate(() => sessionStorage.getItem('tcg.token')?.startsWith('eyJ')), 'the tab holds a console token');
    const res = await page.goto(`${base}/proxy/${apiKey}/${upstream.authority}/steal.html`);
    t.equal(res?.status(), 200, 'the tool\'s page is served');
    await page.waitForTimeout(500);
    t.notMatch(await page.title(), /eyJ|worker/, 'its script did not run as the console\'s origin');
    await page.goto(`${base}/console`);
    t.equal(await page.evaluate(() => navigator.serviceWorker.getRegistrations().then((r) => r.length)), 0, 'no service worker was registered');
    t.equal(context.serviceWorkers().length, 0);
  });
}

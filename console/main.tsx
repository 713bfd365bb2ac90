// The operator console: a hash-routed preact app (#/agents, #/audit, ...), so
// every page is /console and the server needs no route per page.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { setToken, token, whenUnauthorized } from './api.js';
import { AgentsPage } from './pages/agents.js';
import { ApprovalsPage } from './pages/approvals.js';
import { AuditPage } from './pages/audit.js';
import { CredentialsPage } from './pages/credentials.js';
import { LoginPage } from './pages/login.js';
import { OverviewPage } from './pages/overview.js';
import { PolicyPage } from './pages/policy.js';

const NAV = [
  ['#/overview', 'Overview'],
  ['#/agents', 'Agents'],
  ['#/credentials', 'Credentials'],
  ['#/audit', 'Audit'],
  ['#/approvals', 'Approvals'],
] as const;

function currentRoute(): string[] {
  return location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
}

function App() {
  const [route, setRoute] = useState(currentRoute());
  const [signedIn, setSignedIn] = useState(token() !== null);
  useEffect(() => {
    const onHash = () => setRoute(currentRoute());
    addEventListener('hashchange', onHash);
    whenUnauthorized(() => {
      setToken(null);
      setSignedIn(false);
    });
    return () => removeEventListener('hashchange', onHash);
  }, []);

  if (!signedIn) return <LoginPage onSignedIn={() => setSignedIn(true)} />;
  const [page = 'overview', arg] = route;
  let body;
  if (page === 'agents') body = <AgentsPage />;
  else if (page === 'credentials') body = <CredentialsPage />;
  else if (page === 'policy' && arg !== undefined) body = <PolicyPage agentId={arg} />;
  else if (page === 'audit') body = <AuditPage />;
  else if (page === 'approvals') body = <ApprovalsPage />;
  else body = <OverviewPage />;
  const active = page === 'policy' ? 'agents' : page;
  return (
    <>
      <header class="top">
        <span class="brand">Tool-Call Guard</span>
        <nav aria-label="Main">
          {NAV.map(([href, label]) => (
            <a href={href} aria-current={href === `#/${active}` ? 'page' : undefined}>{label}</a>
          ))}
        </nav>
        <button
          type="button"
          class="link"
          onClick={() => {
            setToken(null);
            setSignedIn(false);
          }}
        >
          Log out
        </button>
      </header>
      <main id="main">{body}</main>
    </>
  );
}

render(<App />, document.getElementById('app')!);

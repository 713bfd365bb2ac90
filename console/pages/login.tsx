// Sign up or log in: POST /auth/signup or /auth/login, the token kept in sessionStorage.
import { useState } from 'preact/hooks';
import { post, setToken } from '../api.js';
import { ErrorLine, useAction } from '../ui.js';

export function LoginPage({ onSignedIn }: { onSignedIn: () => void }) {
  const [mode, setMode] = useState<'login' | 'signup'>('login');
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [error, run] = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    void run(async () => {
      const answer = await post<{ access_token: string }>(`/auth/${mode}`, { email, password });
      setToken(answer.access_token);
      if (!location.hash) location.hash = '#/overview';
      onSignedIn();
    });
  };
  return (
    <main id="main" class="login">
      <h1>Tool-Call Guard</h1>
      <form onSubmit={submit} class="card">
        <h2>{mode === 'login' ? 'Log in' : 'Sign up'}</h2>
        <label>
          Email
          <input type="email" name="email" autoComplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
        </label>
        <label>
          Password
          <input
            type="password"
            name="password"
            autoComplete={mode === 'login' ? 'current-password' : 'new-password'}
            minLength={8}
            required
            value={password}
            onInput={(e) => setPassword(e.currentTarget.value)}
          />
        </label>
        <ErrorLine message={error} />
        <button type="submit" class="primary">{mode === 'login' ? 'Log in' : 'Sign up'}</button>
        <button type="button" class="link" onClick={() => setMode(mode === 'login' ? 'signup' : 'login')}>
          {mode === 'login' ? 'No account? Sign up' : 'Have an account? Log in'}
        </button>
      </form>
    </main>
  );
}

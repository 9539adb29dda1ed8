import { useEffect, useState } from 'preact/hooks';
import { acceptInvite, ApiError, login, signup } from '../api';

type Mode = 'login' | 'signup' | 'invite';

export function Login({ invite, onDone, signedIn }: { invite: string | null; onDone: () => void; signedIn: boolean }) {
  const [mode, setMode] = useState<Mode>(invite ? 'invite' : 'login');
  const [f, setF] = useState({ email: '', password: '', name: '', org: '', invite: invite ?? '' });
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    if (signedIn && !invite) onDone();
  }, [signedIn]);
  if (signedIn && !invite) return null;
  const field = (k: keyof typeof f) => ({
    value: f[k],
    onInput: (e: Event) => setF({ ...f, [k]: (e.target as HTMLInputElement).value }),
  });
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      if (mode === 'login') await login(f.email, f.password);
      else if (mode === 'signup') await signup(f.email, f.password, f.name, f.org);
      else await acceptInvite(f.invite, f.password, f.name);
      onDone();
    } catch (err) {
      const e = err as ApiError;
      setError(e.code === 'rate_limited' ? 'Too many attempts; wait a few seconds.' : e.message);
    } finally {
      setBusy(false);
    }
  };
  const title = mode === 'login' ? 'Sign in' : mode === 'signup' ? 'Create an account' : 'Join your team';
  return (
    <main class="login" id="main">
      <form class="card" onSubmit={submit} aria-labelledby="login-title">
        <p class="brand">◈ Sextant</p>
        <h1 id="login-title">{title}</h1>
        {mode === 'invite' && (
          <label>
            Invitation token
            <input required autoComplete="off" {...field('invite')} />
          </label>
        )}
        {mode !== 'invite' && (
          <label>
            Email
            <input type="email" required autoComplete="username" {...field('email')} />
          </label>
        )}
        <label>
          Password
          <input type="password" required minLength={8} autoComplete={mode === 'login' ? 'current-password' : 'new-password'} {...field('password')} />
        </label>
        {mode !== 'login' && (
          <label>
            Your name
            <input required autoComplete="name" {...field('name')} />
          </label>
        )}
        {mode === 'signup' && (
          <label>
            Organization name
            <input required autoComplete="organization" {...field('org')} />
          </label>
        )}
        {error && (
          <p class="notice error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="primary" disabled={busy}>
          {title}
        </button>
        <p class="muted small">
          {mode === 'login' ? (
            <>
              New here?{' '}
              <button type="button" class="link" onClick={() => setMode('signup')}>
                Create an account
              </button>
            </>
          ) : (
            <>
              Have an account?{' '}
              <button type="button" class="link" onClick={() => setMode('login')}>
                Sign in
              </button>
            </>
          )}
        </p>
      </form>
    </main>
  );
}

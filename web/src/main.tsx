import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import './styles.css';
import { get, logout, onSessionChange, refresh, session, setProject } from './api';
import { Login } from './pages/Login';
import { href, navigate, onLinkClick, setParams, useLocation } from './url';
import { pageFor, NAV } from './pages';
import { useLoad } from './components/data';

type Theme = 'dark' | 'light';

function initialTheme(): Theme {
  const saved = localStorage.getItem('sextant-theme');
  if (saved === 'dark' || saved === 'light') return saved;
  return matchMedia('(prefers-color-scheme: light)').matches ? 'light' : 'dark';
}

function App() {
  const loc = useLocation();
  const [ready, setReady] = useState(false);
  const [, setTick] = useState(0);
  const [theme, setTheme] = useState<Theme>(initialTheme);
  useEffect(() => {
    document.documentElement.dataset.theme = theme;
    localStorage.setItem('sextant-theme', theme);
  }, [theme]);
  useEffect(() => {
    const off = onSessionChange(() => setTick((t) => t + 1));
    refresh().finally(() => setReady(true));
    return off;
  }, []);

  if (!ready) return <p class="muted center" role="status">Loading…</p>;
  const claims = session();
  if (!claims || loc.path === '/login') {
    // Signed out on a page of the application: back to that page (its URL) once signed in.
    const done = () => navigate(loc.path === '/login' ? '/traces' : loc.path + location.search, true);
    return <Login invite={loc.params.get('invite')} onDone={done} signedIn={!!claims} />;
  }
  return <Shell path={loc.path} params={loc.params} theme={theme} setTheme={setTheme} />;
}

function ProjectSwitcher({ params }: { params: URLSearchParams }) {
  const projects = useLoad(() => get<{ items: { id: string; name: string; is_default: boolean }[] }>('/projects', { limit: 1000 }), []);
  const items = projects.data?.items ?? [];
  const chosen = params.get('project') ?? items.find((p) => p.is_default)?.id ?? '';
  return (
    <label class="switcher">
      <span>Project</span>
      <select aria-label="Project" value={chosen} onChange={(e) => setParams({ project: (e.target as HTMLSelectElement).value })}>
        {items.map((p) => (
          <option value={p.id}>{p.name}</option>
        ))}
      </select>
    </label>
  );
}

function Shell({ path, params, theme, setTheme }: { path: string; params: URLSearchParams; theme: Theme; setTheme: (t: Theme) => void }) {
  setProject(params.get('project'));
  // The payment provider sends the customer back to `/?billing=success|canceled`.
  useEffect(() => {
    const outcome = params.get('billing');
    if (path === '/' && outcome) navigate(href('/settings/billing', { billing: outcome }), true);
  }, [path]);
  const { title, render: Page } = pageFor(path);
  useEffect(() => {
    document.title = `${title} · Sextant`;
    (document.getElementById('main') as HTMLElement | null)?.focus({ preventScroll: true });
  }, [path]);
  // "/" focuses the page's search field; "g" then a key goes to a page (see the nav titles).
  useEffect(() => {
    let g = false;
    const onKey = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement;
      if (t.closest('input, textarea, select, [contenteditable]') || e.ctrlKey || e.metaKey || e.altKey) return;
      if (e.key === '/') {
        const s = document.querySelector<HTMLElement>('[data-search]');
        if (s) {
          e.preventDefault();
          s.focus();
        }
      } else if (g) {
        g = false;
        const item = NAV.flatMap((s) => s.items).find((i) => i.key === e.key);
        if (item) navigate(href(item.path));
      } else if (e.key === 'g') g = true;
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, []);
  const claims = session()!;
  return (
    <div class="shell">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <a class="brand" href={href('/traces')}>
          ◈ Sextant
        </a>
        <ProjectSwitcher key={claims.org} params={params} />
        <span class="grow" />
        <span class="muted small" title={`user ${claims.sub}`}>
          {claims.role}
        </span>
        <button type="button" aria-label={theme === 'dark' ? 'Use light theme' : 'Use dark theme'} onClick={() => setTheme(theme === 'dark' ? 'light' : 'dark')}>
          {theme === 'dark' ? '☀' : '☾'}
        </button>
        <button type="button" onClick={() => logout().then(() => navigate('/login', true))}>
          Sign out
        </button>
      </header>
      <nav class="sidebar" aria-label="Pages">
        {NAV.map((s) => (
          <div>
            <h2>{s.title}</h2>
            <ul>
              {s.items.map((i) => (
                <li>
                  <a href={href(i.path)} aria-current={path === i.path || path.startsWith(i.path + '/') ? 'page' : undefined} title={i.key ? `g ${i.key}` : undefined}>
                    {i.title}
                  </a>
                </li>
              ))}
            </ul>
          </div>
        ))}
      </nav>
      <main id="main" tabIndex={-1}>
        <Page key={(params.get('project') ?? '') + path} path={path} params={params} />
      </main>
    </div>
  );
}

document.addEventListener('click', onLinkClick);
render(<App />, document.getElementById('app')!);

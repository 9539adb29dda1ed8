// Navigation and page state in the URL: every filter a page has is a query parameter, so a
// URL can be shared and the back button works.
import { useEffect, useState } from 'preact/hooks';

const listeners = new Set<() => void>();
function changed() {
  listeners.forEach((f) => f());
}
window.addEventListener('popstate', changed);

/** Parameters carried from page to page. */
const STICKY = ['project', 'range', 'from', 'to'];

export function href(path: string, params: Record<string, string | undefined> = {}, keep = true): string {
  const cur = new URLSearchParams(location.search);
  const p = new URLSearchParams();
  if (keep) for (const k of STICKY) if (cur.get(k)) p.set(k, cur.get(k)!);
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === '') p.delete(k);
    else p.set(k, v);
  }
  const s = p.toString();
  return path + (s ? '?' + s : '');
}

export function navigate(to: string, replace = false) {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  changed();
  if (!replace) window.scrollTo(0, 0);
}

/** Updates query parameters of the current page (undefined or '' removes one). */
export function setParams(patch: Record<string, string | undefined>, replace = false) {
  const p = new URLSearchParams(location.search);
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined || v === '') p.delete(k);
    else p.set(k, v);
  }
  const s = p.toString();
  navigate(location.pathname + (s ? '?' + s : ''), replace);
}

export function useLocation(): { path: string; params: URLSearchParams } {
  const [, setTick] = useState(0);
  useEffect(() => {
    const f = () => setTick((t) => t + 1);
    listeners.add(f);
    return () => void listeners.delete(f);
  }, []);
  return { path: location.pathname, params: new URLSearchParams(location.search) };
}

/** Same-page links go through history instead of reloading. */
export function onLinkClick(e: MouseEvent) {
  const a = (e.target as HTMLElement).closest('a');
  if (!a || a.target || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  if (a.getAttribute('href')?.startsWith('#')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || a.hasAttribute('download')) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
}

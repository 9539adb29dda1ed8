// The API client: the access token lives in memory only; the refresh cookie (HttpOnly,
// Path=/auth) renews it. Every /api call carries the current project.

export interface ApiErrorBody {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string, public details?: Record<string, unknown>) {
    super(message);
  }
}

export interface Claims {
  sub: string;
  org: string;
  role: 'owner' | 'admin' | 'member';
  exp: number;
}

let accessToken: string | null = null;
let claims: Claims | null = null;
let refreshing: Promise<boolean> | null = null;
let refreshTimer: number | undefined;
let currentProject: string | null = null;
const listeners = new Set<() => void>();

export function onSessionChange(f: () => void): () => void {
  listeners.add(f);
  return () => listeners.delete(f);
}
function changed() {
  listeners.forEach((f) => f());
}

export function session(): Claims | null {
  return claims;
}

export function setProject(id: string | null) {
  currentProject = id;
}

function decode(token: string): Claims | null {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part + '='.repeat((4 - (part.length % 4)) % 4))) as Claims;
  } catch {
    return null;
  }
}

function adopt(token: string, expiresIn: number) {
  accessToken = token;
  claims = decode(token);
  window.clearTimeout(refreshTimer);
  // Renew a minute before expiry.
  refreshTimer = window.setTimeout(() => void refresh(), Math.max(5, expiresIn - 60) * 1000);
  changed();
}

function forget() {
  accessToken = null;
  claims = null;
  window.clearTimeout(refreshTimer);
  changed();
}

async function errorOf(resp: Response): Promise<ApiError> {
  let body: { error?: ApiErrorBody } = {};
  try {
    body = await resp.json();
  } catch {
    /* not JSON */
  }
  const e = body.error;
  return new ApiError(resp.status, e?.code ?? 'http_' + resp.status, e?.message ?? resp.statusText, e?.details);
}

/** Renews the access token from the refresh cookie; false when there is no session. */
export function refresh(): Promise<boolean> {
  if (!refreshing) {
    refreshing = (async () => {
      try {
        const resp = await fetch('/auth/refresh', { method: 'POST', credentials: 'same-origin' });
        if (!resp.ok) {
          forget();
          return false;
        }
        const body = await resp.json();
        adopt(body.access_token, body.expires_in);
        return true;
      } catch {
        return false;
      } finally {
        refreshing = null;
      }
    })();
  }
  return refreshing;
}

async function authPost(path: string, body: unknown): Promise<any> {
  const resp = await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!resp.ok) throw await errorOf(resp);
  const json = await resp.json();
  adopt(json.access_token, json.expires_in);
  return json;
}

export const login = (email: string, password: string) => authPost('/auth/login', { email, password });
export const signup = (email: string, password: string, name: string, org_name: string) =>
  authPost('/auth/signup', { email, password, name, org_name });
export const acceptInvite = (invite_token: string, password: string, name: string) =>
  authPost('/auth/invite/accept', { invite_token, password, name });

export async function logout() {
  try {
    await fetch('/auth/logout', { method: 'POST', credentials: 'same-origin' });
  } finally {
    forget();
  }
}

type Query = Record<string, string | number | boolean | null | undefined>;

export function qs(q: Query): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  const s = p.toString();
  return s ? '?' + s : '';
}

/** A JWT request; one renewal and retry on 401. */
export async function api<T = any>(method: string, path: string, opts: { query?: Query; body?: unknown; signal?: AbortSignal } = {}): Promise<T> {
  const url = path + qs(opts.query ?? {});
  for (let attempt = 0; ; attempt++) {
    if (!accessToken && !(await refresh())) throw new ApiError(401, 'unauthorized', 'Signed out');
    const headers: Record<string, string> = { Authorization: 'Bearer ' + accessToken };
    if (currentProject) headers['X-Project-Id'] = currentProject;
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
    const resp = await fetch(url, {
      method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      signal: opts.signal,
      credentials: 'same-origin',
    });
    if (resp.status === 401 && attempt === 0) {
      accessToken = null;
      continue;
    }
    if (resp.status === 429 && attempt < 3) {
      const wait = Number(resp.headers.get('Retry-After') ?? '1');
      await new Promise((r) => setTimeout(r, Math.min(5, Math.max(1, wait)) * 1000));
      continue;
    }
    if (!resp.ok) {
      const e = await errorOf(resp);
      if (resp.status === 401) forget();
      throw e;
    }
    if (resp.status === 204) return undefined as T;
    return (await resp.json()) as T;
  }
}

export const get = <T = any>(path: string, query?: Query, signal?: AbortSignal) => api<T>('GET', path, { query, signal });

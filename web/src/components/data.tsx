import { useEffect, useRef, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';
import { ApiError } from '../api';

export interface Loaded<T> {
  data: T | null;
  error: ApiError | Error | null;
  loading: boolean;
  reload: () => void;
}

/** Runs `load` whenever `deps` change; an older answer never overwrites a newer one. */
export function useLoad<T>(load: (signal: AbortSignal) => Promise<T> | null, deps: unknown[]): Loaded<T> {
  const [state, setState] = useState<{ data: T | null; error: Error | null; loading: boolean }>({ data: null, error: null, loading: true });
  const [tick, setTick] = useState(0);
  const gen = useRef(0);
  useEffect(() => {
    const ctl = new AbortController();
    const mine = ++gen.current;
    const p = load(ctl.signal);
    if (!p) {
      setState({ data: null, error: null, loading: false });
      return;
    }
    setState((s) => ({ ...s, loading: true }));
    p.then(
      (data) => mine === gen.current && setState({ data, error: null, loading: false }),
      (error) => mine === gen.current && error.name !== 'AbortError' && setState({ data: null, error, loading: false }),
    );
    return () => ctl.abort();
  }, [...deps, tick]);
  return { ...state, reload: () => setTick((t) => t + 1) };
}

export function ErrorBox({ error }: { error: Error | null }) {
  if (!error) return null;
  const code = error instanceof ApiError ? error.code : '';
  const msg =
    code === 'plan_feature_unavailable'
      ? "Your organization's plan does not include this analysis."
      : error.message;
  return (
    <div class="notice error" role="alert">
      <strong>{code === 'plan_feature_unavailable' ? 'Not on this plan' : 'Could not load'}</strong> {msg}
      {code && code !== 'plan_feature_unavailable' && <code class="muted"> ({code})</code>}
    </div>
  );
}

export function Status<T>({ r, empty, children }: { r: Loaded<T>; empty?: boolean; children?: ComponentChildren }) {
  if (r.error) return <ErrorBox error={r.error} />;
  if (r.loading && !r.data) return <p class="muted" role="status">Loading…</p>;
  if (empty) return <p class="muted" role="status">{children ?? 'Nothing in this time range.'}</p>;
  return null;
}

/** A secret shown once, with a copy button. */
export function ShownOnce({ label, value, onClose }: { label: string; value: string; onClose: () => void }) {
  const [copied, setCopied] = useState(false);
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => ref.current?.querySelector('input')?.focus(), []);
  return (
    <div class="notice secret" role="dialog" aria-label={label} ref={ref}>
      <p>
        <strong>{label}</strong>: shown only now. Copy it somewhere safe.
      </p>
      <div class="row">
        <input aria-label={label} readOnly value={value} class="mono grow" onFocus={(e) => (e.target as HTMLInputElement).select()} />
        <button
          type="button"
          onClick={() => navigator.clipboard?.writeText(value).then(() => setCopied(true), () => setCopied(false))}
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
        <button type="button" onClick={onClose}>
          Done
        </button>
      </div>
    </div>
  );
}

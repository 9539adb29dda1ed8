import { useState } from 'preact/hooks';
import { api, ApiError, get, session } from '../api';
import { ErrorBox, Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { fmtNum, fmtTime } from '../time';
import { setParams } from '../url';
import type { PageProps } from '.';

interface Filter {
  service?: string;
  operation?: string;
  level?: string;
  query?: string;
  hostname?: string;
  event?: string;
}
interface Alert {
  id: string;
  name: string;
  metric: string;
  filter: Filter;
  comparison: string;
  threshold: number;
  window_minutes: number;
  for_seconds: number;
  enabled: boolean;
  webhook_id: string | null;
  state: 'ok' | 'firing' | string;
  last_value: number | null;
  last_evaluated_at: string | null;
  managed_by: { kind: string; namespace: string; name: string } | null;
  created_at: string;
  history?: { seq: number; from: string; to: string; at: string; value: number | null }[];
}

const METRICS: [string, string, (keyof Filter)[]][] = [
  ['error_rate', 'Error rate of spans (0–1)', ['service', 'operation']],
  ['error_count', 'Error spans', ['service', 'operation']],
  ['span_count', 'Spans', ['service', 'operation']],
  ['request_rate', 'Spans per second', ['service', 'operation']],
  ['p50_latency_ms', 'p50 latency (ms)', ['service', 'operation']],
  ['p95_latency_ms', 'p95 latency (ms)', ['service', 'operation']],
  ['p99_latency_ms', 'p99 latency (ms)', ['service', 'operation']],
  ['log_count', 'Log lines', ['service', 'level', 'query']],
  ['cpu_percent', 'Host CPU %', ['hostname']],
  ['memory_used_bytes', 'Host memory used (bytes)', ['hostname']],
  ['disk_used_percent', 'Host disk used %', ['hostname']],
  ['event_count', 'Analytics events', ['event']],
];
const FILTER_LABEL: Record<keyof Filter, string> = {
  service: 'Service',
  operation: 'Operation',
  level: 'Level',
  query: 'Log query',
  hostname: 'Host',
  event: 'Event',
};

function describe(a: Alert) {
  const label = METRICS.find(([m]) => m === a.metric)?.[1] ?? a.metric;
  const f = Object.entries(a.filter ?? {})
    .filter(([, v]) => v)
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
  return `${label}${f ? ` (${f})` : ''} ${a.comparison} ${a.threshold} over ${a.window_minutes} min${a.for_seconds ? `, for ${a.for_seconds} s` : ''}`;
}

function NewAlert({ onCreated }: { onCreated: () => void }) {
  const [f, setF] = useState({ name: '', metric: 'error_rate', comparison: '>', threshold: '0.05', window: '5', forSeconds: '0', webhook: '' });
  const [filter, setFilter] = useState<Filter>({});
  const [error, setError] = useState<Error | null>(null);
  const hooks = useLoad((signal) => get<{ items: { id: string; url: string }[] }>('/api/webhooks', { limit: 1000 }, signal).catch(() => ({ items: [] })), []);
  const keys = METRICS.find(([m]) => m === f.metric)?.[2] ?? [];
  const set = (k: keyof typeof f) => (e: Event) => setF({ ...f, [k]: (e.target as HTMLInputElement).value });
  return (
    <form
      class="builder card"
      aria-label="New alert rule"
      onSubmit={async (e) => {
        e.preventDefault();
        setError(null);
        const chosen: Filter = {};
        for (const k of keys) if (filter[k]) chosen[k] = filter[k];
        try {
          await api('POST', '/api/v1/alerts', {
            body: {
              name: f.name,
              metric: f.metric,
              filter: chosen,
              comparison: f.comparison,
              threshold: Number(f.threshold),
              window_minutes: Number(f.window),
              for_seconds: Number(f.forSeconds),
              enabled: true,
              webhook_id: f.webhook || null,
            },
          });
          setF({ ...f, name: '' });
          onCreated();
        } catch (err) {
          setError(err as ApiError);
        }
      }}
    >
      <h2>New alert rule</h2>
      <div class="row wrap">
        <label>
          Name <input required value={f.name} onInput={set('name')} />
        </label>
        <label>
          Metric{' '}
          <select aria-label="Metric" value={f.metric} onChange={set('metric')}>
            {METRICS.map(([m, l]) => (
              <option value={m}>{l}</option>
            ))}
          </select>
        </label>
        {keys.map((k) => (
          <label>
            {FILTER_LABEL[k]} <input value={filter[k] ?? ''} placeholder="any" onInput={(e) => setFilter({ ...filter, [k]: (e.target as HTMLInputElement).value })} />
          </label>
        ))}
      </div>
      <div class="row wrap">
        <label>
          Comparison{' '}
          <select aria-label="Comparison" value={f.comparison} onChange={set('comparison')}>
            {['>', '>=', '<', '<='].map((c) => (
              <option value={c}>{c}</option>
            ))}
          </select>
        </label>
        <label>
          Threshold <input required type="number" step="any" class="narrow" value={f.threshold} onInput={set('threshold')} />
        </label>
        <label>
          Window (minutes) <input required type="number" min={1} max={1440} class="narrow" value={f.window} onInput={set('window')} />
        </label>
        <label>
          Pending for (seconds) <input type="number" min={0} class="narrow" value={f.forSeconds} onInput={set('forSeconds')} />
        </label>
        <label>
          Notify webhook{' '}
          <select aria-label="Notify webhook" value={f.webhook} onChange={set('webhook')}>
            <option value="">none</option>
            {(hooks.data?.items ?? []).map((h) => (
              <option value={h.id}>{h.url}</option>
            ))}
          </select>
        </label>
        <button type="submit" class="primary">
          Create rule
        </button>
      </div>
      <ErrorBox error={error} />
    </form>
  );
}

export function Alerts({ params }: PageProps) {
  const list = useLoad((signal) => get<{ items: Alert[] }>('/api/v1/alerts', { limit: 1000 }, signal), []);
  const open = params.get('alert');
  const one = useLoad((signal) => (open ? get<Alert>(`/api/v1/alerts/${encodeURIComponent(open)}`, {}, signal) : null), [open]);
  const [error, setError] = useState<Error | null>(null);
  const manage = ['owner', 'admin'].includes(session()?.role ?? '');
  const items = list.data?.items ?? [];
  return (
    <>
      <PageHeader title="Alerts" onRefresh={list.reload} />
      {manage && <NewAlert onCreated={list.reload} />}
      <ErrorBox error={error} />
      <Status r={list} empty={!!list.data && items.length === 0}>
        No alert rules in this project.
      </Status>
      {items.length > 0 && (
        <table class="plain" aria-label="Alert rules">
          <thead>
            <tr>
              <th>State</th>
              <th>Name</th>
              <th>Condition</th>
              <th class="num">Last value</th>
              <th>Evaluated</th>
              <th>
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {items.map((a) => (
              <tr>
                <td>
                  <span class={a.state === 'firing' ? 'bad' : a.enabled ? 'good' : 'muted'}>{a.enabled ? a.state : 'disabled'}</span>
                </td>
                <td>
                  <button type="button" class="link" aria-expanded={open === a.id} onClick={() => setParams({ alert: open === a.id ? undefined : a.id }, true)}>
                    {a.name}
                  </button>
                </td>
                <td>{describe(a)}</td>
                <td class="num">{fmtNum(a.last_value, 3)}</td>
                <td>{a.last_evaluated_at ? fmtTime(a.last_evaluated_at) : '–'}</td>
                <td>
                  {a.managed_by ? (
                    <span class="muted small">managed by {a.managed_by.kind} {a.managed_by.namespace}/{a.managed_by.name}</span>
                  ) : (
                    manage && (
                      <button
                        type="button"
                        aria-label={`Delete ${a.name}`}
                        onClick={async () => {
                          if (!confirm(`Delete the alert rule ${a.name}?`)) return;
                          try {
                            await api('DELETE', `/api/v1/alerts/${encodeURIComponent(a.id)}`);
                            list.reload();
                          } catch (err) {
                            setError(err as ApiError);
                          }
                        }}
                      >
                        Delete
                      </button>
                    )
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {open && (
        <section aria-label="Rule history">
          <h2>History of {one.data?.name ?? 'the rule'}</h2>
          <Status r={one} empty={!!one.data && !(one.data.history ?? []).length}>
            It has not changed state yet.
          </Status>
          {one.data?.history && one.data.history.length > 0 && (
            <table class="plain" aria-label="State changes">
              <thead>
                <tr>
                  <th>When</th>
                  <th>From</th>
                  <th>To</th>
                  <th class="num">Value</th>
                </tr>
              </thead>
              <tbody>
                {[...one.data.history].reverse().map((h) => (
                  <tr>
                    <td>{fmtTime(h.at)}</td>
                    <td>{h.from}</td>
                    <td class={h.to === 'firing' ? 'bad' : ''}>{h.to}</td>
                    <td class="num">{fmtNum(h.value, 3)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </section>
      )}
    </>
  );
}

import { useState } from 'preact/hooks';
import { api, ApiError, get, session } from '../api';
import { ErrorBox, ShownOnce, Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { fmtTime } from '../time';
import { setParams } from '../url';
import type { PageProps } from '.';

interface Webhook {
  id: string;
  url: string;
  events: string[];
  enabled: boolean;
  created_at: string;
  disabled_reason?: string;
  secret?: string;
}
interface Attempt {
  attempt: number;
  at: string;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
}
interface Delivery {
  id: string;
  event: string;
  status: 'pending' | 'succeeded' | 'failed';
  created_at: string;
  attempts: Attempt[];
  next_attempt_at: string | null;
}

const SYSTEM = ['system.alert_triggered', 'system.alert_resolved', 'system.quota_exceeded'];

function Deliveries({ id }: { id: string }) {
  const list = useLoad((signal) => get<{ items: Delivery[] }>(`/api/webhooks/${encodeURIComponent(id)}/deliveries`, { limit: 100 }, signal), [id]);
  const items = list.data?.items ?? [];
  return (
    <section aria-label="Deliveries">
      <div class="row">
        <h2>Deliveries</h2>
        <button type="button" onClick={list.reload} aria-label="Refresh deliveries">
          ↻
        </button>
      </div>
      <Status r={list} empty={!!list.data && items.length === 0}>
        Nothing delivered yet.
      </Status>
      {items.length > 0 && (
        <table class="plain" aria-label="Delivery history">
          <thead>
            <tr>
              <th>Created</th>
              <th>Event</th>
              <th>Status</th>
              <th>Attempts</th>
              <th>Next attempt</th>
            </tr>
          </thead>
          <tbody>
            {items.map((d) => (
              <tr>
                <td>{fmtTime(d.created_at)}</td>
                <td>{d.event}</td>
                <td class={d.status === 'failed' ? 'bad' : d.status === 'succeeded' ? 'good' : 'warn'}>{d.status}</td>
                <td>
                  {d.attempts.map((a) => (
                    <div class="small">
                      #{a.attempt} {fmtTime(a.at)} · {a.status_code ?? a.error ?? '–'} · {a.duration_ms} ms
                    </div>
                  ))}
                </td>
                <td>{d.next_attempt_at ? fmtTime(d.next_attempt_at) : '–'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

export function Webhooks({ params }: PageProps) {
  const list = useLoad((signal) => get<{ items: Webhook[] }>('/api/webhooks', { limit: 1000 }, signal), []);
  const [form, setForm] = useState({ url: '', events: '' });
  const [created, setCreated] = useState<Webhook | null>(null);
  const [note, setNote] = useState<string | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const open = params.get('webhook');
  const manage = ['owner', 'admin'].includes(session()?.role ?? '');
  const items = list.data?.items ?? [];
  return (
    <>
      <PageHeader title="Webhooks" onRefresh={list.reload} />
      <p class="muted">
        Signed HTTPS calls (Standard Webhooks) for analytics events of this project and for {SYSTEM.join(', ')}.
      </p>
      {manage && (
        <form
          class="filters"
          aria-label="New webhook"
          onSubmit={async (e) => {
            e.preventDefault();
            setError(null);
            try {
              const events = form.events.split(',').map((s) => s.trim()).filter(Boolean);
              setCreated(await api<Webhook>('POST', '/api/webhooks', { body: { url: form.url, events } }));
              setForm({ url: '', events: '' });
              list.reload();
            } catch (err) {
              setError(err as ApiError);
            }
          }}
        >
          <label class="grow">
            URL <input required type="url" placeholder="https://example.com/hooks/sextant" value={form.url} onInput={(e) => setForm({ ...form, url: (e.target as HTMLInputElement).value })} />
          </label>
          <label class="grow">
            Events (comma-separated) <input required placeholder="purchase, system.alert_triggered" value={form.events} onInput={(e) => setForm({ ...form, events: (e.target as HTMLInputElement).value })} />
          </label>
          <button type="submit" class="primary">
            Create webhook
          </button>
        </form>
      )}
      <ErrorBox error={error} />
      {created?.secret && <ShownOnce label={`Signing secret of ${created.url}`} value={created.secret} onClose={() => setCreated(null)} />}
      {note && (
        <p class="notice" role="status">
          {note}
        </p>
      )}
      <Status r={list} empty={!!list.data && items.length === 0}>
        No webhooks in this project.
      </Status>
      {items.length > 0 && (
        <table class="plain" aria-label="Webhooks">
          <thead>
            <tr>
              <th>URL</th>
              <th>Events</th>
              <th>State</th>
              <th>Created</th>
              <th>
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {items.map((w) => (
              <tr>
                <td class="mono">
                  <button type="button" class="link" aria-expanded={open === w.id} onClick={() => setParams({ webhook: open === w.id ? undefined : w.id }, true)}>
                    {w.url}
                  </button>
                </td>
                <td>{w.events.join(', ')}</td>
                <td class={w.enabled ? 'good' : 'bad'}>{w.enabled ? 'enabled' : `disabled${w.disabled_reason ? ` (${w.disabled_reason})` : ''}`}</td>
                <td>{fmtTime(w.created_at)}</td>
                <td class="row">
                  {manage && (
                    <>
                      <button
                        type="button"
                        aria-label={`Send a test to ${w.url}`}
                        onClick={async () => {
                          setNote(null);
                          try {
                            const r = await api<{ status: string; attempt?: Attempt }>('POST', `/api/webhooks/${encodeURIComponent(w.id)}/test`);
                            setNote(`Test delivery ${r.status}${r.attempt ? `: ${r.attempt.status_code ?? r.attempt.error}` : ''}`);
                            if (open === w.id) setParams({ webhook: w.id }, true);
                          } catch (err) {
                            setError(err as ApiError);
                          }
                        }}
                      >
                        Test
                      </button>
                      <button
                        type="button"
                        aria-label={`Delete ${w.url}`}
                        onClick={async () => {
                          if (!confirm(`Delete the webhook to ${w.url}?`)) return;
                          try {
                            await api('DELETE', `/api/webhooks/${encodeURIComponent(w.id)}`);
                            list.reload();
                          } catch (err) {
                            setError(err as ApiError);
                          }
                        }}
                      >
                        Delete
                      </button>
                    </>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {open && <Deliveries key={open + (note ?? '')} id={open} />}
    </>
  );
}

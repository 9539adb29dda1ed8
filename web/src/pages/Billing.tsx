import { useState } from 'preact/hooks';
import { api, ApiError, get, session } from '../api';
import { ErrorBox, Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { fmtBytes, fmtNum, fmtTime } from '../time';
import type { PageProps } from '.';

interface Card {
  brand: string;
  last4: string;
  exp_month: number;
  exp_year: number;
  auto_renew: boolean;
}
interface BillingStatus {
  plan: string;
  status: 'trialing' | 'active' | 'canceled' | 'past_due';
  auto_renew: boolean;
  current_period_start: string | null;
  current_period_end: string | null;
  grace_until: string | null;
  provider: string | null;
  limits: { monthly_gb: number | null; monthly_bytes: number | null; monthly_events: number | null; retention_days: number; features: string[] };
  usage: { used_gb: number; used_bytes: number; events_used: number; percentage: number | null };
  payment_method: Card | null;
}
interface Payment {
  id: string;
  plan: string;
  amount_cents: number;
  currency: string;
  status: string;
  period_start: string;
  period_end: string;
  created_at: string;
}

// Plans the default catalog sells; the payment page shows the price of the catalog in force.
const PLANS = ['pro', 'growth', 'business'];

const money = (cents: number, currency: string) =>
  new Intl.NumberFormat('en-US', { style: 'currency', currency: currency.toUpperCase() }).format(cents / 100);

export function Billing({ params }: PageProps) {
  const status = useLoad((signal) => get<BillingStatus>('/billing/status', {}, signal), []);
  const history = useLoad((signal) => get<{ items: Payment[] }>('/billing/history', { limit: 100 }, signal), []);
  const [plan, setPlan] = useState('growth');
  const [error, setError] = useState<Error | null>(null);
  const owner = session()?.role === 'owner';
  const s = status.data;
  const outcome = params.get('billing');
  const act = async (f: () => Promise<unknown>) => {
    setError(null);
    try {
      await f();
      status.reload();
    } catch (err) {
      setError(err as ApiError);
    }
  };
  return (
    <>
      <PageHeader title="Billing" onRefresh={status.reload} />
      {outcome === 'success' && (
        <p class="notice" role="status">
          Payment done: the plan starts as soon as the payment provider confirms it.
        </p>
      )}
      {outcome === 'canceled' && (
        <p class="notice" role="status">
          The payment was not completed; nothing changed.
        </p>
      )}
      <ErrorBox error={error} />
      <Status r={status} />
      {s && (
        <>
          <dl class="kv wide card" aria-label="Subscription">
            <dt>Plan</dt>
            <dd>
              <b>{s.plan}</b> · {s.status.replace('_', ' ')}
              {s.auto_renew ? ', renews automatically' : ''}
            </dd>
            <dt>{s.status === 'trialing' ? 'Trial ends' : 'Current period'}</dt>
            <dd>
              {s.current_period_start && s.status !== 'trialing' ? `${fmtTime(s.current_period_start)} – ` : ''}
              {s.current_period_end ? fmtTime(s.current_period_end) : 'no end'}
            </dd>
            {s.grace_until && (
              <>
                <dt>Grace until</dt>
                <dd class="warn">{fmtTime(s.grace_until)}</dd>
              </>
            )}
            <dt>Limits</dt>
            <dd>
              {s.limits.monthly_bytes === null ? 'unlimited data' : `${fmtBytes(s.limits.monthly_bytes)} a month`} ·{' '}
              {s.limits.monthly_events === null ? 'unlimited events' : `${fmtNum(s.limits.monthly_events)} events a month`} · {s.limits.retention_days} days of
              retention{s.limits.features.length ? ` · ${s.limits.features.join(', ')}` : ''}
            </dd>
            <dt>This month</dt>
            <dd>
              {fmtBytes(s.usage.used_bytes)} · {fmtNum(s.usage.events_used)} events
            </dd>
            <dt>Card</dt>
            <dd>
              {s.payment_method ? `${s.payment_method.brand} ·${s.payment_method.last4}, expires ${s.payment_method.exp_month}/${s.payment_method.exp_year}` : 'none'}
            </dd>
            <dt>Payments by</dt>
            <dd>{s.provider ?? 'no provider configured'}</dd>
          </dl>
          {owner ? (
            <div class="filters" role="group" aria-label="Change the subscription">
              <label>
                Plan{' '}
                <select aria-label="Plan" value={plan} onChange={(e) => setPlan((e.target as HTMLSelectElement).value)}>
                  {PLANS.map((p) => (
                    <option value={p}>{p}</option>
                  ))}
                </select>
              </label>
              <button
                type="button"
                class="primary"
                onClick={() =>
                  act(async () => {
                    const r = await api<{ payment_url: string }>('POST', '/billing/subscribe', { body: { plan } });
                    window.location.assign(r.payment_url);
                  })
                }
              >
                Subscribe
              </button>
              {s.auto_renew && (
                <button type="button" onClick={() => confirm('Stop renewing? The plan stays until the end of the period.') && act(() => api('POST', '/billing/cancel'))}>
                  Cancel renewal
                </button>
              )}
              {s.payment_method && (
                <button type="button" onClick={() => confirm('Remove the card? Renewal stops.') && act(() => api('DELETE', '/billing/payment-method'))}>
                  Remove card
                </button>
              )}
            </div>
          ) : (
            <p class="muted">Only the organization's owner changes the subscription.</p>
          )}
        </>
      )}
      <h2>Payments</h2>
      <Status r={history} empty={!!history.data && history.data.items.length === 0}>
        No payments yet.
      </Status>
      {history.data && history.data.items.length > 0 && (
        <table class="plain" aria-label="Payments">
          <thead>
            <tr>
              <th>Date</th>
              <th>Plan</th>
              <th>Period</th>
              <th class="num">Amount</th>
              <th>Status</th>
            </tr>
          </thead>
          <tbody>
            {history.data.items.map((p) => (
              <tr>
                <td>{fmtTime(p.created_at)}</td>
                <td>{p.plan}</td>
                <td>
                  {fmtTime(p.period_start).slice(0, 10)} – {fmtTime(p.period_end).slice(0, 10)}
                </td>
                <td class="num">{money(p.amount_cents, p.currency)}</td>
                <td class={p.status === 'failed' ? 'bad' : 'good'}>{p.status}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

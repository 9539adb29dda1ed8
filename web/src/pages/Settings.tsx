import { useState } from 'preact/hooks';
import { api, ApiError, get, session } from '../api';
import { ErrorBox, ShownOnce, Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { VirtualTable } from '../components/VirtualTable';
import { fmtBytes, fmtNum, fmtTime } from '../time';
import type { PageProps } from '.';

const canManage = () => ['owner', 'admin'].includes(session()?.role ?? '');

interface Project {
  id: string;
  name: string;
  created_at: string;
  is_default: boolean;
  managed_by: { kind: string; namespace: string; name: string } | null;
  token?: string;
}

export function Projects(_: PageProps) {
  const list = useLoad((signal) => get<{ items: Project[] }>('/projects', { limit: 1000 }, signal), []);
  const [name, setName] = useState('');
  const [created, setCreated] = useState<Project | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const owner = session()?.role === 'owner';
  return (
    <>
      <PageHeader title="Projects" />
      {owner && (
        <form
          class="filters"
          aria-label="New project"
          onSubmit={async (e) => {
            e.preventDefault();
            setError(null);
            try {
              setCreated(await api<Project>('POST', '/projects', { body: { name } }));
              setName('');
              list.reload();
            } catch (err) {
              setError(err as ApiError);
            }
          }}
        >
          <label>
            New project name <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </label>
          <button type="submit" class="primary">
            Create project
          </button>
        </form>
      )}
      <ErrorBox error={error} />
      {created?.token && <ShownOnce label={`Ingest token of ${created.name}`} value={created.token} onClose={() => setCreated(null)} />}
      <Status r={list} />
      {list.data && (
        <table class="plain" aria-label="Projects">
          <thead>
            <tr>
              <th>Name</th>
              <th>Id</th>
              <th>Created</th>
              <th>Managed by</th>
            </tr>
          </thead>
          <tbody>
            {list.data.items.map((p) => (
              <tr>
                <td>
                  {p.name} {p.is_default && <span class="chip">default</span>}
                </td>
                <td class="mono">{p.id}</td>
                <td>{fmtTime(p.created_at)}</td>
                <td>{p.managed_by ? `${p.managed_by.kind} ${p.managed_by.namespace}/${p.managed_by.name}` : '–'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

interface Member {
  id: string;
  email: string;
  name?: string;
  role: string;
  status: 'active' | 'invited';
  created_at: string;
  expires_at?: string;
  invite_token?: string;
}

export function Members(_: PageProps) {
  const allowed = canManage();
  const list = useLoad((signal) => (allowed ? get<{ items: Member[] }>('/api/org/members', { limit: 1000 }, signal) : null), []);
  const [form, setForm] = useState({ email: '', role: 'member' });
  const [invite, setInvite] = useState<Member | null>(null);
  const [error, setError] = useState<Error | null>(null);
  if (!allowed) {
    return (
      <>
        <PageHeader title="Members" />
        <p class="muted">Only owners and admins see and invite members.</p>
      </>
    );
  }
  const me = session()?.sub;
  return (
    <>
      <PageHeader title="Members" />
      <form
        class="filters"
        aria-label="Invite a member"
        onSubmit={async (e) => {
          e.preventDefault();
          setError(null);
          try {
            setInvite(await api<Member>('POST', '/api/org/members', { body: form }));
            setForm({ ...form, email: '' });
            list.reload();
          } catch (err) {
            setError(err as ApiError);
          }
        }}
      >
        <label>
          Email <input type="email" required value={form.email} onInput={(e) => setForm({ ...form, email: (e.target as HTMLInputElement).value })} />
        </label>
        <label>
          Role{' '}
          <select aria-label="Role" value={form.role} onChange={(e) => setForm({ ...form, role: (e.target as HTMLSelectElement).value })}>
            <option value="member">member</option>
            <option value="admin">admin</option>
          </select>
        </label>
        <button type="submit" class="primary">
          Invite
        </button>
      </form>
      <ErrorBox error={error} />
      {invite?.invite_token && (
        <ShownOnce
          label={`Invitation link for ${invite.email}`}
          value={`${location.origin}/login?invite=${encodeURIComponent(invite.invite_token)}`}
          onClose={() => setInvite(null)}
        />
      )}
      <Status r={list} />
      {list.data && (
        <table class="plain" aria-label="Members">
          <thead>
            <tr>
              <th>Email</th>
              <th>Name</th>
              <th>Role</th>
              <th>Status</th>
              <th>Since</th>
              <th>
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {list.data.items.map((m) => (
              <tr>
                <td>{m.email}</td>
                <td>{m.name ?? '–'}</td>
                <td>{m.role}</td>
                <td>{m.status === 'invited' ? `invited, until ${fmtTime(m.expires_at!)}` : 'active'}</td>
                <td>{fmtTime(m.created_at)}</td>
                <td>
                  {m.role !== 'owner' && m.id !== me && (
                    <button
                      type="button"
                      onClick={async () => {
                        if (!confirm(m.status === 'invited' ? `Withdraw the invitation of ${m.email}?` : `Remove ${m.email}? Their sessions end now.`)) return;
                        try {
                          await api('DELETE', `/api/org/members/${encodeURIComponent(m.id)}`);
                          list.reload();
                        } catch (err) {
                          setError(err as ApiError);
                        }
                      }}
                    >
                      {m.status === 'invited' ? 'Withdraw' : 'Remove'}
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

interface ApiKey {
  id: string;
  name: string;
  prefix: string;
  created_at: string;
  managed_by: unknown;
  key?: string;
}

export function ApiKeys(_: PageProps) {
  const list = useLoad((signal) => get<{ items: ApiKey[] }>('/api/v1/api-keys', { limit: 1000 }, signal), []);
  const [name, setName] = useState('');
  const [created, setCreated] = useState<ApiKey | null>(null);
  const [error, setError] = useState<Error | null>(null);
  const allowed = canManage();
  return (
    <>
      <PageHeader title="API keys" />
      <p class="muted">Keys of the current project, for observability ingest (spans, logs, host metrics, OTLP).</p>
      {allowed && (
        <form
          class="filters"
          aria-label="New API key"
          onSubmit={async (e) => {
            e.preventDefault();
            setError(null);
            try {
              setCreated(await api<ApiKey>('POST', '/api/v1/api-keys', { body: { name } }));
              setName('');
              list.reload();
            } catch (err) {
              setError(err as ApiError);
            }
          }}
        >
          <label>
            Key name <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </label>
          <button type="submit" class="primary">
            Create key
          </button>
        </form>
      )}
      <ErrorBox error={error} />
      {created?.key && <ShownOnce label={`API key ${created.name}`} value={created.key} onClose={() => setCreated(null)} />}
      <Status r={list} empty={!!list.data && list.data.items.length === 0}>
        This project has no API keys.
      </Status>
      {list.data && list.data.items.length > 0 && (
        <table class="plain" aria-label="API keys">
          <thead>
            <tr>
              <th>Name</th>
              <th>Prefix</th>
              <th>Created</th>
              <th>
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {list.data.items.map((k) => (
              <tr>
                <td>{k.name}</td>
                <td class="mono">{k.prefix}…</td>
                <td>{fmtTime(k.created_at)}</td>
                <td>
                  {allowed && !k.managed_by && (
                    <button
                      type="button"
                      aria-label={`Revoke ${k.name}`}
                      onClick={async () => {
                        if (!confirm(`Revoke the key ${k.name}? Senders using it are refused within a second.`)) return;
                        try {
                          await api('DELETE', `/api/v1/api-keys/${encodeURIComponent(k.id)}`);
                          list.reload();
                        } catch (err) {
                          setError(err as ApiError);
                        }
                      }}
                    >
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

interface UsageCounts {
  used_gb: number;
  bytes: number;
  spans: number;
  logs: number;
  metric_samples: number;
  events: number;
  replay_events: number;
}
interface UsageBody extends UsageCounts {
  plan: string;
  in_trial: boolean;
  trial_days_left: number;
  limit_gb: number | null;
  percentage: number | null;
  events_used: number;
  events_limit: number | null;
  period_start: string;
  period_end: string;
  projects: (UsageCounts & { project_id: string; name: string })[];
  history: (UsageCounts & { month: string; events_used: number })[];
}

function Meter({ label, value, max, text }: { label: string; value: number; max: number | null; text: string }) {
  return (
    <div class="meter">
      <div class="row">
        <b>{label}</b>
        <span class="grow" />
        <span>{text}</span>
      </div>
      {max !== null ? (
        <progress aria-label={label} max={max} value={Math.min(value, max)} />
      ) : (
        <span class="muted small">unlimited</span>
      )}
    </div>
  );
}

export function Usage(_: PageProps) {
  const u = useLoad((signal) => get<UsageBody>('/api/v1/usage', {}, signal), []);
  const d = u.data;
  return (
    <>
      <PageHeader title="Usage" onRefresh={u.reload} />
      <Status r={u} />
      {d && (
        <>
          <p class="summary">
            Plan <b>{d.plan}</b>
            {d.in_trial && ` · trial, ${d.trial_days_left} days left`} · {fmtTime(d.period_start).slice(0, 10)} to {fmtTime(d.period_end).slice(0, 10)}
          </p>
          <div class="grid2">
            <Meter label="Observability data" value={d.used_gb} max={d.limit_gb} text={`${d.used_gb.toFixed(3)} GB${d.limit_gb !== null ? ` of ${d.limit_gb} GB` : ''}`} />
            <Meter label="Analytics events" value={d.events_used} max={d.events_limit} text={`${fmtNum(d.events_used)}${d.events_limit !== null ? ` of ${fmtNum(d.events_limit)}` : ''}`} />
          </div>
          <h2>By project, this month</h2>
          <VirtualTable
            label="Usage by project"
            rows={d.projects}
            columns={[
              { label: 'Project', width: '1fr', cell: (p) => p.name },
              { label: 'Data', width: '100px', align: 'right', cell: (p) => fmtBytes(p.bytes) },
              { label: 'Spans', width: '100px', align: 'right', cell: (p) => fmtNum(p.spans) },
              { label: 'Log lines', width: '100px', align: 'right', cell: (p) => fmtNum(p.logs) },
              { label: 'Host samples', width: '110px', align: 'right', cell: (p) => fmtNum(p.metric_samples) },
              { label: 'Events', width: '100px', align: 'right', cell: (p) => fmtNum(p.events) },
              { label: 'Replay events', width: '110px', align: 'right', cell: (p) => fmtNum(p.replay_events) },
            ]}
          />
          {d.history.length > 0 && (
            <>
              <h2>Earlier months</h2>
              <table class="plain" aria-label="Earlier months">
                <thead>
                  <tr>
                    <th>Month</th>
                    <th class="num">Data</th>
                    <th class="num">Events</th>
                  </tr>
                </thead>
                <tbody>
                  {d.history.map((h) => (
                    <tr>
                      <td>{h.month}</td>
                      <td class="num">{fmtBytes(h.bytes)}</td>
                      <td class="num">{fmtNum(h.events_used)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </>
          )}
        </>
      )}
    </>
  );
}

import { useState } from 'preact/hooks';
import { api, ApiError, get } from '../api';
import { ErrorBox, Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { VirtualTable } from '../components/VirtualTable';
import { fmtNum, fmtTime } from '../time';
import { href, navigate } from '../url';
import type { PageProps } from '.';

interface Condition {
  type: 'did' | 'did_not';
  event: string;
  count_op: string;
  count: number;
  range: string;
}
interface Cohort {
  id: string;
  name: string;
  size: number;
  created_at: string;
  conditions: { logic: 'and' | 'or'; conditions: Condition[] };
}

const OPS = ['>=', '>', '=', '<=', '<', '!='];
const blank = (): Condition => ({ type: 'did', event: '', count_op: '>=', count: 1, range: '30d' });

function describe(c: Cohort['conditions']) {
  return c.conditions
    .map((x) => `${x.type === 'did' ? 'did' : 'did not do'} ${x.event}${x.type === 'did' ? ` ${x.count_op} ${x.count}×` : ''} in ${x.range}`)
    .join(c.logic === 'and' ? ' and ' : ' or ');
}

function Builder({ onCreated }: { onCreated: (c: Cohort) => void }) {
  const [name, setName] = useState('');
  const [logic, setLogic] = useState<'and' | 'or'>('and');
  const [conds, setConds] = useState<Condition[]>([blank()]);
  const [error, setError] = useState<Error | null>(null);
  const set = (i: number, patch: Partial<Condition>) => setConds(conds.map((c, j) => (j === i ? { ...c, ...patch } : c)));
  return (
    <form
      class="builder card"
      aria-label="New cohort"
      onSubmit={async (e) => {
        e.preventDefault();
        setError(null);
        try {
          const c = await api<Cohort>('POST', '/api/cohorts', { body: { name, conditions: { logic, conditions: conds } } });
          setName('');
          setConds([blank()]);
          onCreated(c);
        } catch (err) {
          setError(err as ApiError);
        }
      }}
    >
      <h2>New cohort</h2>
      <div class="row wrap">
        <label>
          Name <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Users matching{' '}
          <select aria-label="Users matching" value={logic} onChange={(e) => setLogic((e.target as HTMLSelectElement).value as 'and' | 'or')}>
            <option value="and">all conditions</option>
            <option value="or">any condition</option>
          </select>
        </label>
      </div>
      <ol class="conds">
        {conds.map((c, i) => (
          <li class="row wrap" aria-label={`Condition ${i + 1}`}>
            <select aria-label={`Condition ${i + 1} type`} value={c.type} onChange={(e) => set(i, { type: (e.target as HTMLSelectElement).value as Condition['type'] })}>
              <option value="did">did</option>
              <option value="did_not">did not do</option>
            </select>
            <input aria-label={`Condition ${i + 1} event`} required placeholder="event name" value={c.event} onInput={(e) => set(i, { event: (e.target as HTMLInputElement).value })} />
            {c.type === 'did' && (
              <>
                <select aria-label={`Condition ${i + 1} comparison`} value={c.count_op} onChange={(e) => set(i, { count_op: (e.target as HTMLSelectElement).value })}>
                  {OPS.map((o) => (
                    <option value={o}>{o}</option>
                  ))}
                </select>
                <input aria-label={`Condition ${i + 1} count`} type="number" min={0} class="narrow" value={c.count} onInput={(e) => set(i, { count: Number((e.target as HTMLInputElement).value) })} />
                <span>times</span>
              </>
            )}
            <label>
              in the last{' '}
              <input aria-label={`Condition ${i + 1} range`} class="narrow" pattern="[0-9]+[mhdw]" value={c.range} onInput={(e) => set(i, { range: (e.target as HTMLInputElement).value })} />
            </label>
            {conds.length > 1 && (
              <button type="button" aria-label={`Remove condition ${i + 1}`} onClick={() => setConds(conds.filter((_, j) => j !== i))}>
                ✕
              </button>
            )}
          </li>
        ))}
      </ol>
      <div class="row">
        <button type="button" disabled={conds.length >= 20} onClick={() => setConds([...conds, blank()])}>
          Add condition
        </button>
        <button type="submit" class="primary">
          Create cohort
        </button>
      </div>
      <ErrorBox error={error} />
    </form>
  );
}

export function Cohorts({ path }: PageProps) {
  const id = path.startsWith('/cohorts/') ? decodeURIComponent(path.slice('/cohorts/'.length)) : null;
  const list = useLoad((signal) => (id ? null : get<{ items: Cohort[] }>('/api/cohorts', { limit: 100 }, signal)), [id]);
  const one = useLoad((signal) => (id ? get<Cohort>(`/api/cohorts/${encodeURIComponent(id)}`, {}, signal) : null), [id]);
  const users = useLoad(
    async (signal) => {
      if (!id) return null;
      const all: string[] = [];
      let cursor: string | null = null;
      // Up to 10,000 members, a page at a time.
      do {
        const b: { items: { distinct_id: string }[]; next_cursor: string | null } = await get(`/api/cohorts/${encodeURIComponent(id)}/users`, { limit: 1000, cursor }, signal);
        all.push(...b.items.map((u) => u.distinct_id));
        cursor = b.next_cursor;
      } while (cursor && all.length < 10_000);
      return { all, more: !!cursor };
    },
    [id],
  );
  if (id) {
    const c = one.data;
    return (
      <>
        <PageHeader title={c ? `Cohort: ${c.name}` : 'Cohort'} onRefresh={one.reload} />
        <p>
          <a href={href('/cohorts')}>← All cohorts</a>
        </p>
        <Status r={one} />
        {c && (
          <>
            <p class="summary">
              <b>{fmtNum(c.size)}</b> users who {describe(c.conditions)}.{' '}
              <a href={href('/events', { cohort_id: c.id })}>Their events</a> · <a href={href('/active-users', { cohort_id: c.id })}>Their activity</a>
            </p>
            <Status r={users} empty={!!users.data && users.data.all.length === 0}>
              Nobody matches now.
            </Status>
            {users.data && users.data.all.length > 0 && (
              <VirtualTable
                label="Cohort members"
                rows={users.data.all}
                onOpen={(u) => navigate(href('/replays', { distinct_id: u }))}
                columns={[{ label: 'Distinct id', cell: (u) => <span class="mono">{u}</span> }]}
                footer={`${fmtNum(users.data.all.length)}${users.data.more ? '+' : ''} members; open one to see their replays`}
              />
            )}
          </>
        )}
      </>
    );
  }
  const items = list.data?.items ?? [];
  return (
    <>
      <PageHeader title="Cohorts" onRefresh={list.reload} />
      <Builder onCreated={(c) => navigate(href(`/cohorts/${c.id}`))} />
      <Status r={list} empty={!!list.data && items.length === 0}>
        No cohorts yet.
      </Status>
      {items.length > 0 && (
        <VirtualTable
          label="Cohorts"
          rows={items}
          onOpen={(c) => navigate(href(`/cohorts/${c.id}`))}
          columns={[
            { label: 'Name', width: '220px', cell: (c) => <a href={href(`/cohorts/${c.id}`)}>{c.name}</a> },
            { label: 'Definition', width: 'minmax(0, 1fr)', cell: (c) => <span class="msg">{describe(c.conditions)}</span> },
            { label: 'Users', width: '90px', align: 'right', cell: (c) => fmtNum(c.size) },
            { label: 'Created', width: '160px', cell: (c) => fmtTime(c.created_at) },
          ]}
        />
      )}
    </>
  );
}

import { useMemo, useState } from 'preact/hooks';
import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { TimeChart } from '../components/charts';
import { CohortSelect } from '../components/CohortSelect';
import { fmtNum, fmtTime, iso, resolveRange, rangeKey } from '../time';
import { setParams } from '../url';
import type { PageProps } from '.';

const PALETTE = ['#4c9aff', '#2ec27e', '#f5a623', '#c678dd', '#f25f5c', '#56b6c2', '#e5c07b', '#98c379', '#d19a66', '#61afef'];

interface Series {
  event: string | string[] | null;
  interval: string;
  points: { t: string; count: number; unique_users: number }[];
}

export function Events({ params }: PageProps) {
  const r = resolveRange(params, '7d');
  const event = params.get('event') ?? '';
  const interval = params.get('interval') ?? (r.to - r.from <= 2 * 86_400_000 ? 'hour' : 'day');
  const cohort = params.get('cohort_id') ?? '';
  const tz = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  const [input, setInput] = useState(event);
  const names = event.split(',').map((e) => e.trim()).filter(Boolean);
  const breakdown = params.get('breakdown') === 'event' && names.length > 1;
  const query = { from: iso(r.from), to: iso(r.to), interval, tz, cohort_id: cohort };
  const res = useLoad((signal) => get<Series>('/api/events/timeseries', { ...query, event }, signal), [event, interval, cohort, rangeKey(r)]);
  // The API counts a list of events together; a breakdown asks once per event.
  const parts = useLoad(
    async (signal) => {
      if (!breakdown) return null;
      const out: Series[] = [];
      for (const name of names.slice(0, 10)) out.push(await get<Series>('/api/events/timeseries', { ...query, event: name }, signal));
      return out;
    },
    [breakdown, event, interval, cohort, rangeKey(r)],
  );
  const pts = res.data?.points ?? [];
  const chart = useMemo(
    () => ({
      xs: pts.map((p) => Date.parse(p.t)),
      series:
        breakdown && parts.data
          ? parts.data.map((sr, i) => ({ label: names[i], values: sr.points.map((p) => p.count), color: PALETTE[i % PALETTE.length] }))
          : [
              { label: 'Events', values: pts.map((p) => p.count), color: '#4c9aff' },
              { label: 'Unique users', values: pts.map((p) => p.unique_users), color: '#2ec27e' },
            ],
    }),
    [res.data, parts.data],
  );
  const total = pts.reduce((a, p) => a + p.count, 0);
  return (
    <>
      <PageHeader title="Events" params={params} def="7d" onRefresh={res.reload} />
      <form
        class="filters"
        aria-label="Event filters"
        onSubmit={(e) => {
          e.preventDefault();
          setParams({ event: input });
        }}
      >
        <label class="grow">
          Events (comma-separated; empty: all)
          <input data-search value={input} placeholder="signup, purchase" onInput={(e) => setInput((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Interval{' '}
          <select aria-label="Interval" value={interval} onChange={(e) => setParams({ interval: (e.target as HTMLSelectElement).value })}>
            {['hour', 'day', 'week', 'month'].map((i) => (
              <option value={i}>{i}</option>
            ))}
          </select>
        </label>
        <CohortSelect value={cohort} />
        <label class="check">
          <input
            type="checkbox"
            checked={params.get('breakdown') === 'event'}
            onChange={(e) => setParams({ breakdown: (e.target as HTMLInputElement).checked ? 'event' : undefined })}
          />
          Break down by event
        </label>
        <button type="submit" class="primary">
          Show
        </button>
      </form>
      <Status r={res} />
      {breakdown && <Status r={parts} />}
      {res.data && (
        <>
          <p class="summary">
            {fmtNum(total)} events in {pts.length} {interval} buckets ({tz})
          </p>
          <TimeChart label={`Events per ${interval}`} xs={chart.xs} series={chart.series} height={260} />
          <details>
            <summary>Table</summary>
            <table class="plain" aria-label="Events per bucket">
              <thead>
                <tr>
                  <th>Bucket start</th>
                  <th class="num">Events</th>
                  <th class="num">Unique users</th>
                  {breakdown && parts.data && names.slice(0, 10).map((n) => <th class="num">{n}</th>)}
                </tr>
              </thead>
              <tbody>
                {pts.map((p, i) => (
                  <tr>
                    <td>{fmtTime(p.t)}</td>
                    <td class="num">{fmtNum(p.count)}</td>
                    <td class="num">{fmtNum(p.unique_users)}</td>
                    {breakdown && parts.data && parts.data.map((sr) => <td class="num">{fmtNum(sr.points[i]?.count)}</td>)}
                  </tr>
                ))}
              </tbody>
            </table>
          </details>
        </>
      )}
    </>
  );
}

import { useMemo } from 'preact/hooks';
import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { TimeChart } from '../components/charts';
import { CohortSelect } from '../components/CohortSelect';
import { fmtNum } from '../time';
import { setParams } from '../url';
import type { PageProps } from '.';

const PERIODS = ['7d', '30d', '90d', '180d', '365d'];

export function ActiveUsers({ params }: PageProps) {
  const period = PERIODS.includes(params.get('period') ?? '') ? params.get('period')! : '30d';
  const cohort = params.get('cohort_id') ?? '';
  const tz = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  const res = useLoad(
    (signal) => get<{ points: { date: string; dau: number; wau: number; mau: number }[] }>('/api/users/active', { period, tz, cohort_id: cohort }, signal),
    [period, cohort],
  );
  const pts = res.data?.points ?? [];
  const chart = useMemo(
    () => ({
      // Days as local midnights, matching the time zone asked for.
      xs: pts.map((p) => new Date(p.date + 'T00:00:00').getTime()),
      series: [
        { label: 'Daily', values: pts.map((p) => p.dau), color: '#4c9aff' },
        { label: 'Weekly', values: pts.map((p) => p.wau), color: '#2ec27e' },
        { label: 'Monthly', values: pts.map((p) => p.mau), color: '#9b7bff' },
      ],
    }),
    [res.data],
  );
  const last = pts[pts.length - 1];
  return (
    <>
      <PageHeader title="Active users" onRefresh={res.reload}>
        <label>
          Period{' '}
          <select aria-label="Period" value={period} onChange={(e) => setParams({ period: (e.target as HTMLSelectElement).value })}>
            {PERIODS.map((p) => (
              <option value={p}>last {p}</option>
            ))}
          </select>
        </label>
        <CohortSelect value={cohort} />
      </PageHeader>
      <Status r={res} />
      {last && (
        <div class="stats" role="list" aria-label="Latest day">
          <div role="listitem">
            <span class="muted">DAU</span> <b>{fmtNum(last.dau)}</b>
          </div>
          <div role="listitem">
            <span class="muted">WAU</span> <b>{fmtNum(last.wau)}</b>
          </div>
          <div role="listitem">
            <span class="muted">MAU</span> <b>{fmtNum(last.mau)}</b>
          </div>
        </div>
      )}
      {pts.length > 0 && <TimeChart label="Daily, weekly and monthly active users" xs={chart.xs} series={chart.series} height={280} />}
    </>
  );
}

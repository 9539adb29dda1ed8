import { useState } from 'preact/hooks';
import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { fmtNum, fmtPct, fmtTime } from '../time';
import { setParams } from '../url';
import type { PageProps } from '.';

interface Cohort {
  cohort_start: string;
  size: number;
  values: { period: number; count: number; rate: number }[];
}

const DAY = 86_400_000;
/** Longest range a read may cover (31 days), as periods of each kind. */
const MAX_PERIODS: Record<string, number> = { day: 31, week: 4 };

export function Retention({ params }: PageProps) {
  const start = params.get('start_event') ?? '';
  const ret = params.get('return_event') ?? '';
  const period = params.get('period') === 'week' ? 'week' : 'day';
  const periods = Math.min(Number(params.get('periods') ?? (period === 'day' ? 8 : 4)) || 8, MAX_PERIODS[period]);
  const type = params.get('type') === 'recurring' ? 'recurring' : 'first_time';
  const [draft, setDraft] = useState({ start, ret });
  const tz = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  const res = useLoad(
    (signal) => {
      if (!start || !ret) return null;
      const to = Date.now();
      const from = to - (periods - 1) * (period === 'day' ? DAY : 7 * DAY);
      return get<{ period: string; cohorts: Cohort[] }>(
        '/api/retention',
        { start_event: start, return_event: ret, period, periods, type, tz, from: new Date(from).toISOString(), to: new Date(to).toISOString() },
        signal,
      );
    },
    [start, ret, period, periods, type],
  );
  const cohorts = res.data?.cohorts ?? [];
  const now = Date.now();
  const periodMs = period === 'day' ? DAY : 7 * DAY;
  return (
    <>
      <PageHeader title="Retention" />
      <form
        class="filters"
        aria-label="Retention query"
        onSubmit={(e) => {
          e.preventDefault();
          setParams({ start_event: draft.start, return_event: draft.ret });
        }}
      >
        <label>
          Start event
          <input required data-search value={draft.start} placeholder="signup" onInput={(e) => setDraft({ ...draft, start: (e.target as HTMLInputElement).value })} />
        </label>
        <label>
          Return event
          <input required value={draft.ret} placeholder="login" onInput={(e) => setDraft({ ...draft, ret: (e.target as HTMLInputElement).value })} />
        </label>
        <label>
          Period{' '}
          <select aria-label="Period" value={period} onChange={(e) => setParams({ period: (e.target as HTMLSelectElement).value, periods: undefined })}>
            <option value="day">day</option>
            <option value="week">week</option>
          </select>
        </label>
        <label>
          Periods{' '}
          <input type="number" class="narrow" min={1} max={MAX_PERIODS[period]} value={periods} onChange={(e) => setParams({ periods: (e.target as HTMLInputElement).value })} />
        </label>
        <label>
          Cohorts by{' '}
          <select aria-label="Cohorts by" value={type} onChange={(e) => setParams({ type: (e.target as HTMLSelectElement).value })}>
            <option value="first_time">first time</option>
            <option value="recurring">every time</option>
          </select>
        </label>
        <button type="submit" class="primary">
          Calculate
        </button>
      </form>
      {(!start || !ret) && <p class="muted">Pick the event that starts a cohort and the event that counts as coming back.</p>}
      <Status r={res} empty={!!res.data && cohorts.length === 0} />
      {cohorts.length > 0 && (
        <div class="scrollx">
          <table class="retention" aria-label="Retention">
            <thead>
              <tr>
                <th>Cohort</th>
                <th class="num">Users</th>
                {Array.from({ length: periods }, (_, j) => (
                  <th class="num">
                    {period === 'day' ? 'Day' : 'Week'} {j}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {cohorts.map((c) => (
                <tr>
                  <th scope="row">{fmtTime(c.cohort_start).slice(0, 10)}</th>
                  <td class="num">{fmtNum(c.size)}</td>
                  {c.values.map((v) => {
                    const future = Date.parse(c.cohort_start) + v.period * periodMs > now;
                    if (future) return <td class="future" aria-label="not yet" />;
                    const a = c.size ? v.rate : 0;
                    return (
                      <td class="num cell" style={{ background: `rgba(76, 154, 255, ${0.08 + a * 0.85})`, color: a > 0.55 ? '#0b1220' : undefined }} title={`${v.count} users`}>
                        {c.size ? fmtPct(v.rate, 0) : '–'}
                      </td>
                    );
                  })}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

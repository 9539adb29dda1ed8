import { useState } from 'preact/hooks';
import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { CohortSelect } from '../components/CohortSelect';
import { fmtDuration, fmtNum, fmtPct } from '../time';
import { setParams } from '../url';
import type { PageProps } from '.';

interface FunnelStep {
  event: string;
  count: number;
  conversion_from_start: number;
  conversion_from_previous: number;
  median_seconds_to_convert: number | null;
  avg_seconds_to_convert: number | null;
}

const RANGES = ['1d', '7d', '14d', '30d'];

export function Funnel({ params }: PageProps) {
  const steps = (params.get('steps') ?? '').split(',').filter(Boolean);
  const window = params.get('window') ?? '14';
  const unit = params.get('window_unit') ?? 'day';
  const range = params.get('range') && RANGES.includes(params.get('range')!) ? params.get('range')! : '30d';
  const order = params.get('order') ?? 'ordered';
  const cohort = params.get('cohort_id') ?? '';
  const [draft, setDraft] = useState<string[]>(steps.length >= 2 ? steps : [...steps, '', ''].slice(0, Math.max(2, steps.length)));
  const [win, setWin] = useState(window);
  const res = useLoad(
    (signal) =>
      steps.length >= 2
        ? get<{ steps: FunnelStep[]; window_seconds: number; from: string; to: string }>(
            '/api/funnel',
            { steps: steps.join(','), window, window_unit: unit, range, order, cohort_id: cohort },
            signal,
          )
        : null,
    [steps.join(','), window, unit, range, order, cohort],
  );
  const result = res.data?.steps ?? [];
  const first = result[0]?.count || 0;
  return (
    <>
      <PageHeader title="Funnels" />
      <form
        class="builder"
        aria-label="Funnel builder"
        onSubmit={(e) => {
          e.preventDefault();
          setParams({ steps: draft.map((s) => s.trim()).filter(Boolean).join(','), window: win });
        }}
      >
        <ol class="steps">
          {draft.map((s, i) => (
            <li>
              <label>
                Step {i + 1}
                <input
                  required
                  value={s}
                  placeholder="event name"
                  onInput={(e) => setDraft(draft.map((x, j) => (j === i ? (e.target as HTMLInputElement).value : x)))}
                />
              </label>
              {draft.length > 2 && (
                <button type="button" aria-label={`Remove step ${i + 1}`} onClick={() => setDraft(draft.filter((_, j) => j !== i))}>
                  ✕
                </button>
              )}
            </li>
          ))}
        </ol>
        <div class="row wrap">
          <button type="button" disabled={draft.length >= 10} onClick={() => setDraft([...draft, ''])}>
            Add step
          </button>
          <label>
            Conversion window <input type="number" min={1} class="narrow" value={win} onInput={(e) => setWin((e.target as HTMLInputElement).value)} />
          </label>
          <label>
            <span class="sr-only">Window unit</span>
            <select aria-label="Window unit" value={unit} onChange={(e) => setParams({ window_unit: (e.target as HTMLSelectElement).value })}>
              {['minute', 'hour', 'day', 'week'].map((u) => (
                <option value={u}>{u}s</option>
              ))}
            </select>
          </label>
          <label>
            First step within{' '}
            <select aria-label="First step within" value={range} onChange={(e) => setParams({ range: (e.target as HTMLSelectElement).value })}>
              {RANGES.map((r) => (
                <option value={r}>last {r}</option>
              ))}
            </select>
          </label>
          <label>
            Order{' '}
            <select aria-label="Order" value={order} onChange={(e) => setParams({ order: (e.target as HTMLSelectElement).value })}>
              <option value="ordered">ordered (other events may come between)</option>
              <option value="strict">strict (consecutive events)</option>
            </select>
          </label>
          <CohortSelect value={cohort} />
          <button type="submit" class="primary">
            Calculate
          </button>
        </div>
      </form>
      {steps.length < 2 && <p class="muted">Name at least two events, in order, and calculate.</p>}
      <Status r={res} />
      {result.length > 0 && (
        <section aria-label="Funnel result">
          <div class="funnel" role="list">
            {result.map((s, i) => (
              <div class="fstep" role="listitem" aria-label={`Step ${i + 1} ${s.event}: ${s.count} users`}>
                <div class="fbar-wrap">
                  <div class="fbar" style={{ height: `${first ? (s.count / first) * 100 : 0}%` }} />
                </div>
                <div class="flabel">
                  <b>
                    {i + 1}. {s.event}
                  </b>
                  <span>{fmtNum(s.count)} users</span>
                  <span class="muted">{fmtPct(s.conversion_from_start)} of start</span>
                </div>
              </div>
            ))}
          </div>
          <table class="plain" aria-label="Funnel steps">
            <thead>
              <tr>
                <th>Step</th>
                <th class="num">Users</th>
                <th class="num">From start</th>
                <th class="num">From previous</th>
                <th class="num">Median time</th>
                <th class="num">Average time</th>
              </tr>
            </thead>
            <tbody>
              {result.map((s, i) => (
                <tr>
                  <td>
                    {i + 1}. {s.event}
                  </td>
                  <td class="num">{fmtNum(s.count)}</td>
                  <td class="num">{fmtPct(s.conversion_from_start)}</td>
                  <td class="num">{fmtPct(s.conversion_from_previous)}</td>
                  <td class="num">{s.median_seconds_to_convert === null ? '–' : fmtDuration(s.median_seconds_to_convert * 1000)}</td>
                  <td class="num">{s.avg_seconds_to_convert === null ? '–' : fmtDuration(s.avg_seconds_to_convert * 1000)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
    </>
  );
}

import { get } from '../api';
import { useLoad } from './data';
import { setParams } from '../url';

/** Restricts an analysis to a cohort (`cohort_id` in the URL). */
export function CohortSelect({ value }: { value: string }) {
  const cohorts = useLoad((signal) => get<{ items: { id: string; name: string }[] }>('/api/cohorts', { limit: 100 }, signal), []);
  return (
    <label>
      Cohort{' '}
      <select aria-label="Cohort" value={value} onChange={(e) => setParams({ cohort_id: (e.target as HTMLSelectElement).value })}>
        <option value="">All users</option>
        {(cohorts.data?.items ?? []).map((c) => (
          <option value={c.id}>{c.name}</option>
        ))}
      </select>
    </label>
  );
}

import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { VirtualTable } from '../components/VirtualTable';
import { fmtDuration, fmtNum, fmtPct, iso, resolveRange, rangeKey } from '../time';
import { href, navigate, setParams } from '../url';
import type { PageProps } from '.';

interface Endpoint {
  service: string;
  operation: string;
  count: number;
  error_count: number;
  error_rate: number;
  rps: number;
  avg_ms: number;
  p50_ms: number;
  p90_ms: number;
  p95_ms: number;
  p99_ms: number;
  max_ms: number;
}

const SORTS = [
  ['count', 'Requests'],
  ['error_rate', 'Error rate'],
  ['error_count', 'Errors'],
  ['rps', 'Requests/s'],
  ['avg_ms', 'Average'],
  ['p50_ms', 'p50'],
  ['p95_ms', 'p95'],
  ['p99_ms', 'p99'],
  ['max_ms', 'Max'],
];

export function Apm({ params }: PageProps) {
  const r = resolveRange(params, '1h');
  const sort = params.get('sort') ?? 'count';
  const service = params.get('service') ?? '';
  const res = useLoad(
    (signal) => get<{ items: Endpoint[] }>('/api/v1/apm/endpoints', { from: iso(r.from), to: iso(r.to), sort, service }, signal),
    [rangeKey(r), sort, service],
  );
  const items = res.data?.items ?? [];
  return (
    <>
      <PageHeader title="APM" params={params} def="1h" onRefresh={res.reload}>
        <label>
          Sort by{' '}
          <select aria-label="Sort by" value={sort} onChange={(e) => setParams({ sort: (e.target as HTMLSelectElement).value })}>
            {SORTS.map(([k, l]) => (
              <option value={k}>{l}</option>
            ))}
          </select>
        </label>
        <label>
          Service{' '}
          <input data-search value={service} class="narrow" onChange={(e) => setParams({ service: (e.target as HTMLInputElement).value })} />
        </label>
      </PageHeader>
      <Status r={res} empty={!!res.data && items.length === 0}>
        No spans in this range.
      </Status>
      {items.length > 0 && (
        <VirtualTable
          label="Endpoints"
          rows={items}
          onOpen={(e) => navigate(href('/traces', { service: e.service, operation: e.operation }))}
          rowClass={(e) => (e.error_rate > 0.05 ? 'err' : '')}
          columns={[
            { label: 'Service', width: '140px', cell: (e) => <b>{e.service}</b> },
            { label: 'Operation', width: 'minmax(160px, 2fr)', cell: (e) => e.operation },
            { label: 'Requests', width: '90px', align: 'right', cell: (e) => fmtNum(e.count) },
            { label: 'Req/s', width: '70px', align: 'right', cell: (e) => (e.rps > 0 && e.rps < 0.01 ? e.rps.toPrecision(2) : fmtNum(e.rps, 2)) },
            { label: 'Error rate', width: '90px', align: 'right', cell: (e) => <span class={e.error_rate > 0 ? 'bad' : ''}>{fmtPct(e.error_rate)}</span> },
            { label: 'Avg', width: '80px', align: 'right', cell: (e) => fmtDuration(e.avg_ms) },
            { label: 'p50', width: '80px', align: 'right', cell: (e) => fmtDuration(e.p50_ms) },
            { label: 'p90', width: '80px', align: 'right', cell: (e) => fmtDuration(e.p90_ms) },
            { label: 'p95', width: '80px', align: 'right', cell: (e) => fmtDuration(e.p95_ms) },
            { label: 'p99', width: '80px', align: 'right', cell: (e) => fmtDuration(e.p99_ms) },
            { label: 'Max', width: '80px', align: 'right', cell: (e) => fmtDuration(e.max_ms) },
          ]}
        />
      )}
    </>
  );
}

import { useMemo } from 'preact/hooks';
import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { Sparkline, TimeChart } from '../components/charts';
import { VirtualTable } from '../components/VirtualTable';
import { fmtBytes, fmtNum, fmtTime, iso, resolveRange, rangeKey } from '../time';
import { setParams } from '../url';
import type { PageProps } from '.';

interface Host {
  hostname: string;
  last_seen: string;
  cpu_percent: number | null;
  memory_used_bytes: number | null;
  memory_total_bytes: number | null;
  disk_used_percent: number | null;
  network_rx_bytes_per_sec: number | null;
  network_tx_bytes_per_sec: number | null;
  status: string;
}

interface Point {
  t: string;
  cpu_percent: number | null;
  memory_used_bytes: number | null;
  disk_used_percent: number | null;
  network_rx_bytes_per_sec: number | null;
  network_tx_bytes_per_sec: number | null;
}

const MINUTE_MS = 60_000;

/** The series request for about `n` points over the range: steps of whole minutes (never
 * under a minute, the usual interval of host agents, so that charts are lines rather than
 * dots) from a whole minute, which the server answers from per-minute rollups. */
const seriesParams = (from: number, to: number, n: number) => {
  const start = Math.floor(from / MINUTE_MS) * MINUTE_MS;
  const minutes = Math.max(1, Math.ceil((to - start) / MINUTE_MS / n));
  return { from: iso(start), to: iso(to), step: `${minutes}m` };
};

// Sparklines for the first hosts only: one request each, within the per-user rate limit.
const SPARK_HOSTS = 20;

export function Hosts({ params }: PageProps) {
  const r = resolveRange(params, '1h');
  const selected = params.get('host');
  const dep = [rangeKey(r)];
  const hosts = useLoad((signal) => get<{ items: Host[] }>('/api/v1/infrastructure/hosts', { from: iso(r.from), to: iso(r.to) }, signal), dep);
  const items = hosts.data?.items ?? [];
  const sparks = useLoad(
    async (signal) => {
      const out: Record<string, (number | null)[]> = {};
      for (const h of items.slice(0, SPARK_HOSTS)) {
        const m = await get<{ points: Point[] }>(`/api/v1/infrastructure/hosts/${encodeURIComponent(h.hostname)}/metrics`, seriesParams(r.from, r.to, 40), signal);
        out[h.hostname] = m.points.map((p) => p.cpu_percent);
      }
      return out;
    },
    [hosts.data],
  );
  const detail = useLoad(
    (signal) => (selected ? get<{ points: Point[] }>(`/api/v1/infrastructure/hosts/${encodeURIComponent(selected)}/metrics`, seriesParams(r.from, r.to, 200), signal) : null),
    [selected, ...dep],
  );
  const charts = useMemo(() => {
    const pts = detail.data?.points ?? [];
    const xs = pts.map((p) => Date.parse(p.t));
    return {
      xs,
      cpu: [{ label: 'CPU %', values: pts.map((p) => p.cpu_percent), color: '#4c9aff' }, { label: 'Disk %', values: pts.map((p) => p.disk_used_percent), color: '#e5a50a' }],
      mem: [{ label: 'Memory used', values: pts.map((p) => p.memory_used_bytes), color: '#9b7bff' }],
      net: [
        { label: 'Received/s', values: pts.map((p) => p.network_rx_bytes_per_sec), color: '#2ec27e' },
        { label: 'Sent/s', values: pts.map((p) => p.network_tx_bytes_per_sec), color: '#f25f5c' },
      ],
    };
  }, [detail.data]);
  return (
    <>
      <PageHeader title="Hosts" params={params} def="1h" onRefresh={hosts.reload} />
      <Status r={hosts} empty={!!hosts.data && items.length === 0}>
        No host sent metrics in this range.
      </Status>
      {items.length > 0 && (
        <VirtualTable
          label="Hosts"
          rows={items}
          rowHeight={36}
          onOpen={(h) => setParams({ host: h.hostname }, true)}
          rowClass={(h) => (h.hostname === selected ? 'sel' : '')}
          columns={[
            { label: 'Host', width: 'minmax(140px, 1fr)', cell: (h) => <b>{h.hostname}</b> },
            { label: 'Status', width: '70px', cell: (h) => <span class={h.status === 'stale' ? 'warn' : 'good'}>{h.status}</span> },
            { label: 'CPU', width: '70px', align: 'right', cell: (h) => (h.cpu_percent === null ? '–' : `${fmtNum(h.cpu_percent, 1)}%`) },
            { label: 'CPU over time', width: '130px', cell: (h) => (sparks.data?.[h.hostname] ? <Sparkline label={`CPU of ${h.hostname}`} values={sparks.data[h.hostname]} max={100} /> : '') },
            { label: 'Memory', width: '150px', align: 'right', cell: (h) => `${fmtBytes(h.memory_used_bytes)} / ${fmtBytes(h.memory_total_bytes)}` },
            { label: 'Disk', width: '70px', align: 'right', cell: (h) => (h.disk_used_percent === null ? '–' : `${fmtNum(h.disk_used_percent, 1)}%`) },
            { label: 'Net in/out', width: '150px', align: 'right', cell: (h) => `${fmtBytes(h.network_rx_bytes_per_sec)}/s · ${fmtBytes(h.network_tx_bytes_per_sec)}/s` },
            { label: 'Last seen', width: '160px', cell: (h) => fmtTime(h.last_seen) },
          ]}
        />
      )}
      {selected && (
        <section aria-label={`Metrics of ${selected}`}>
          <h2>{selected}</h2>
          <Status r={detail} />
          {detail.data && (
            <div class="grid2">
              <TimeChart label={`CPU and disk of ${selected}`} xs={charts.xs} series={charts.cpu} yFormat={(v) => `${v}%`} />
              <TimeChart label={`Memory of ${selected}`} xs={charts.xs} series={charts.mem} yFormat={(v) => fmtBytes(v)} />
              <TimeChart label={`Network of ${selected}`} xs={charts.xs} series={charts.net} yFormat={(v) => fmtBytes(v)} />
            </div>
          )}
        </section>
      )}
    </>
  );
}

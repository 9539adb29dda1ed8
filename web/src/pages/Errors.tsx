import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { VirtualTable } from '../components/VirtualTable';
import { fmtNum, fmtTime, iso, resolveRange, rangeKey } from '../time';
import { href, navigate } from '../url';
import type { PageProps } from '.';

interface Group {
  fingerprint: string;
  service: string;
  type: string;
  message: string;
  count: number;
  first_seen: string;
  last_seen: string;
  sample_trace_id: string | null;
  source: string;
}

export function Errors({ path, params }: PageProps) {
  const r = resolveRange(params, '24h');
  const fp = path.startsWith('/errors/') ? decodeURIComponent(path.slice('/errors/'.length)) : null;
  const q = { from: iso(r.from), to: iso(r.to) };
  const dep = [rangeKey(r)];
  const list = useLoad((signal) => (fp ? null : get<{ items: Group[] }>('/api/v1/errors', { ...q, limit: 1000 }, signal)), [fp, ...dep]);
  const one = useLoad(
    (signal) => (fp ? get<Group & { occurrences: { timestamp: string; trace_id: string | null; message: string }[] }>(`/api/v1/errors/${encodeURIComponent(fp)}`, q, signal) : null),
    [fp, ...dep],
  );
  if (fp) {
    const g = one.data;
    return (
      <>
        <PageHeader title="Error group" params={params} def="24h" onRefresh={one.reload} />
        <p>
          <a href={href('/errors')}>← All error groups</a>
        </p>
        <Status r={one} />
        {g && (
          <>
            <dl class="kv wide">
              <dt>Service</dt>
              <dd>{g.service}</dd>
              <dt>Type</dt>
              <dd>{g.type || '–'}</dd>
              <dt>Message</dt>
              <dd class="mono">{g.message}</dd>
              <dt>Occurrences</dt>
              <dd>{fmtNum(g.count)}</dd>
              <dt>First and last seen</dt>
              <dd>
                {fmtTime(g.first_seen)} – {fmtTime(g.last_seen)}
              </dd>
              <dt>From</dt>
              <dd>{g.source === 'span' ? 'error spans' : 'ERROR/FATAL log lines'}</dd>
            </dl>
            <h2>Latest samples</h2>
            <VirtualTable
              label="Samples"
              rows={g.occurrences}
              onOpen={(o) => o.trace_id && navigate(href(`/traces/${encodeURIComponent(o.trace_id)}`))}
              columns={[
                { label: 'Time', width: '190px', cell: (o) => fmtTime(o.timestamp, true) },
                { label: 'Message', width: 'minmax(0, 1fr)', cell: (o) => <span class="msg">{o.message}</span> },
                { label: 'Trace', width: '90px', cell: (o) => (o.trace_id ? <a href={href(`/traces/${encodeURIComponent(o.trace_id)}`)}>trace</a> : '–') },
              ]}
            />
          </>
        )}
      </>
    );
  }
  const items = list.data?.items ?? [];
  return (
    <>
      <PageHeader title="Errors" params={params} def="24h" onRefresh={list.reload} />
      <Status r={list} empty={!!list.data && items.length === 0}>
        No errors in this range.
      </Status>
      {items.length > 0 && (
        <VirtualTable
          label="Error groups"
          rows={items}
          onOpen={(g) => navigate(href(`/errors/${g.fingerprint}`))}
          columns={[
            { label: 'Service', width: '130px', cell: (g) => <b>{g.service}</b> },
            { label: 'Type', width: '160px', cell: (g) => g.type || <span class="muted">{g.source === 'log' ? 'log' : '–'}</span> },
            { label: 'Message', width: 'minmax(0, 1fr)', cell: (g) => <span class="msg mono">{g.message}</span> },
            { label: 'Count', width: '80px', align: 'right', cell: (g) => <span class="bad">{fmtNum(g.count)}</span> },
            { label: 'Last seen', width: '160px', cell: (g) => fmtTime(g.last_seen) },
          ]}
        />
      )}
    </>
  );
}

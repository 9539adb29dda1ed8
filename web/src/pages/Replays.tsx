import { useEffect, useRef, useState } from 'preact/hooks';
import { get } from '../api';
import { ErrorBox, Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { VirtualTable } from '../components/VirtualTable';
import { fmtBytes, fmtDuration, fmtNum, fmtTime, iso, resolveRange, rangeKey } from '../time';
import { href, navigate, setParams } from '../url';
import type { PageProps } from '.';

interface Session {
  session_id: string;
  distinct_id: string;
  start_time: string;
  end_time: string;
  event_count: number;
  size_bytes: number;
}

export function Replays({ params }: PageProps) {
  const r = resolveRange(params, '7d');
  const user = params.get('distinct_id') ?? '';
  const [input, setInput] = useState(user);
  const res = useLoad(
    (signal) => get<{ items: Session[]; next_cursor: string | null }>('/api/replays', { from: iso(r.from), to: iso(r.to), distinct_id: user, limit: 1000 }, signal),
    [user, rangeKey(r)],
  );
  const items = res.data?.items ?? [];
  return (
    <>
      <PageHeader title="Session replays" params={params} def="7d" onRefresh={res.reload} />
      <form
        class="filters"
        role="search"
        aria-label="Replay filters"
        onSubmit={(e) => {
          e.preventDefault();
          setParams({ distinct_id: input });
        }}
      >
        <label>
          User (distinct id)
          <input data-search value={input} onInput={(e) => setInput((e.target as HTMLInputElement).value)} />
        </label>
        <button type="submit">Filter</button>
      </form>
      <Status r={res} empty={!!res.data && items.length === 0}>
        No recorded sessions in this range.
      </Status>
      {items.length > 0 && (
        <VirtualTable
          label="Sessions"
          rows={items}
          onOpen={(s) => navigate(href(`/replays/${encodeURIComponent(s.session_id)}`))}
          columns={[
            { label: 'Start', width: '170px', cell: (s) => fmtTime(s.start_time) },
            { label: 'User', width: 'minmax(120px, 1fr)', cell: (s) => s.distinct_id },
            { label: 'Length', width: '90px', align: 'right', cell: (s) => fmtDuration(Date.parse(s.end_time) - Date.parse(s.start_time)) },
            { label: 'Events', width: '80px', align: 'right', cell: (s) => fmtNum(s.event_count) },
            { label: 'Size', width: '90px', align: 'right', cell: (s) => fmtBytes(s.size_bytes) },
            { label: 'Session', width: 'minmax(120px, 1fr)', cell: (s) => <a href={href(`/replays/${encodeURIComponent(s.session_id)}`)} class="mono">{s.session_id}</a> },
          ]}
        />
      )}
    </>
  );
}

interface Recording {
  session_id: string;
  distinct_id: string;
  start_time: string;
  end_time: string;
  events: { type: number; data: unknown; timestamp: number }[];
}

const clock = (ms: number) => {
  const s = Math.max(0, Math.floor(ms / 1000));
  return `${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
};

export function ReplayView({ path }: PageProps) {
  const id = decodeURIComponent(path.slice('/replays/'.length));
  const rec = useLoad((signal) => get<Recording>(`/api/replays/${encodeURIComponent(id)}`, {}, signal), [id]);
  const host = useRef<HTMLDivElement>(null);
  const [progress, setProgress] = useState({ at: 0, total: 0, state: 'loading' });
  const [error, setError] = useState<Error | null>(null);
  useEffect(() => {
    const events = rec.data?.events;
    if (!events || !host.current) return;
    if (events.length < 2) {
      setError(new Error('This session has too few events to replay.'));
      return;
    }
    let player: any = null;
    let gone = false;
    // The player (rrweb) is loaded only here: most visits never need it.
    import('./player')
      .then(({ mount }) => {
        if (gone || !host.current) return;
        const width = Math.min(host.current.clientWidth || 960, 1100);
        player = mount(host.current, events, width, Math.round(width * 0.56), (at, total, state) => setProgress({ at, total, state }));
      })
      .catch((e) => setError(e));
    return () => {
      gone = true;
      player?.$destroy?.();
      if (host.current) host.current.innerHTML = '';
    };
  }, [rec.data]);
  const r = rec.data;
  return (
    <>
      <PageHeader title="Replay">
        <code class="muted">{id}</code>
      </PageHeader>
      <p>
        <a href={href('/replays')}>← All sessions</a>
      </p>
      <Status r={rec} />
      <ErrorBox error={error} />
      {r && (
        <>
          <p class="summary">
            {r.distinct_id} · {fmtTime(r.start_time)} · {fmtDuration(Date.parse(r.end_time) - Date.parse(r.start_time))} · {fmtNum(r.events.length)} events
          </p>
          <p role="status" aria-label="Playback" class="muted">
            {progress.state === 'playing' ? 'Playing' : progress.state === 'paused' ? 'Paused' : 'Loading player'} {clock(progress.at)} / {clock(progress.total)}
          </p>
          <div class="player" ref={host} />
        </>
      )}
    </>
  );
}

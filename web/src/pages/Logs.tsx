import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';
import { get } from '../api';
import { ErrorBox, Status, useLoad } from '../components/data';
import { PageHeader } from '../components/page';
import { TimeChart } from '../components/charts';
import { VirtualTable } from '../components/VirtualTable';
import { fmtTime, iso, resolveRange, rangeKey } from '../time';
import { href, setParams } from '../url';
import type { PageProps } from '.';

interface LogLine {
  timestamp: string;
  level: string;
  service: string;
  message: string;
  trace_id: string | null;
  span_id: string | null;
  attributes: Record<string, unknown>;
}

const LEVELS = ['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR', 'FATAL'];
const WORD = /[\p{L}\p{N}_]+/gu;

/** Words the query looks for in messages (not negated, not field:value). */
export function searchedWords(q: string): Set<string> {
  const words = new Set<string>();
  const re = /(-?)"([^"]*)"|(\S+)/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(q))) {
    if (m[1] === '-') continue;
    const text = m[2] ?? m[3];
    if (m[3] !== undefined && (m[3].startsWith('-') || m[3].includes(':'))) continue;
    for (const w of text.match(WORD) ?? []) words.add(w.toLowerCase());
  }
  return words;
}

function highlight(message: string, words: Set<string>): ComponentChildren {
  if (!words.size) return message;
  const out: ComponentChildren[] = [];
  let last = 0;
  for (const m of message.matchAll(WORD)) {
    if (words.has(m[0].toLowerCase())) {
      out.push(message.slice(last, m.index), <mark>{m[0]}</mark>);
      last = m.index! + m[0].length;
    }
  }
  out.push(message.slice(last));
  return out;
}

const lineKey = (l: LogLine) => `${l.timestamp}|${l.service}|${l.level}|${l.message}|${l.span_id ?? ''}`;

/** Counts per time bucket of the lines loaded. */
function histogram(lines: LogLine[], from: number, to: number) {
  const n = 60;
  const step = Math.max(1, Math.ceil((to - from) / n));
  const xs = Array.from({ length: n }, (_, i) => from + i * step);
  const counts = new Array<number>(n).fill(0);
  for (const l of lines) {
    const i = Math.floor((Date.parse(l.timestamp) - from) / step);
    if (i >= 0 && i < n) counts[i]++;
  }
  return { xs, counts };
}

export function Logs({ params }: PageProps) {
  const r = resolveRange(params, '1h');
  const q = params.get('q') ?? '';
  const service = params.get('service') ?? '';
  const levels = (params.get('level') ?? '').split(',').filter(Boolean);
  const live = params.get('live') === '1';
  const [input, setInput] = useState({ q, service });
  const [lines, setLines] = useState<LogLine[]>([]);
  const [next, setNext] = useState<string | null>(null);
  const [tailError, setTailError] = useState<Error | null>(null);
  const query = { q, service, level: levels.join(','), limit: 1000 };
  const res = useLoad(
    (signal) =>
      get<{ items: LogLine[]; next_cursor: string | null }>('/api/v1/logs/search', { ...query, from: iso(r.from), to: iso(r.to) }, signal).then((b) => {
        setLines(b.items);
        setNext(b.next_cursor);
        return b;
      }),
    [q, service, levels.join(','), rangeKey(r)],
  );
  // Live tail: every 2 s, the lines newer than the newest shown, on top.
  const linesRef = useRef(lines);
  linesRef.current = lines;
  useEffect(() => {
    if (!live) return;
    let stop = false;
    let timer: number;
    const poll = async () => {
      const newest = linesRef.current[0] ? Date.parse(linesRef.current[0].timestamp) : Date.now() - 60_000;
      try {
        const b = await get<{ items: LogLine[] }>('/api/v1/logs/search', { ...query, from: iso(newest), to: iso(Date.now() + 1000), limit: 1000 });
        const have = new Set(linesRef.current.slice(0, 2000).map(lineKey));
        const fresh = b.items.filter((l) => !have.has(lineKey(l)));
        if (!stop && fresh.length) setLines((old) => [...fresh, ...old].slice(0, 100_000));
        setTailError(null);
      } catch (e) {
        setTailError(e as Error);
      }
      if (!stop) timer = window.setTimeout(poll, 2000);
    };
    timer = window.setTimeout(poll, 2000);
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, [live, q, service, levels.join(',')]);
  const more = async () => {
    if (!next) return;
    const b = await get<{ items: LogLine[]; next_cursor: string | null }>('/api/v1/logs/search', { ...query, from: iso(r.from), to: iso(r.to), cursor: next });
    setLines([...lines, ...b.items]);
    setNext(b.next_cursor);
  };
  const words = useMemo(() => searchedWords(q), [q]);
  const [open, setOpen] = useState<LogLine | null>(null);
  const hist = useMemo(() => histogram(lines, r.from, live ? Date.now() : r.to), [lines, rangeKey(r)]);
  const series = useMemo(
    () => [{ label: 'Lines', values: hist.counts, color: '#4c9aff', bars: true }],
    [hist],
  );
  return (
    <>
      <PageHeader title="Logs" params={params} def="1h" onRefresh={res.reload}>
        <button type="button" aria-pressed={live} class={live ? 'primary' : ''} onClick={() => setParams({ live: live ? undefined : '1' }, true)}>
          {live ? '● Live tail on' : 'Live tail'}
        </button>
      </PageHeader>
      <form
        class="filters"
        role="search"
        aria-label="Log search"
        onSubmit={(e) => {
          e.preventDefault();
          setParams({ q: input.q, service: input.service });
        }}
      >
        <label class="grow">
          Query
          <input
            data-search
            class="mono"
            value={input.q}
            placeholder={'timeout -retry "connection reset" service:api level:error key:value'}
            onInput={(e) => setInput({ ...input, q: (e.target as HTMLInputElement).value })}
          />
        </label>
        <label>
          Service
          <input value={input.service} onInput={(e) => setInput({ ...input, service: (e.target as HTMLInputElement).value })} />
        </label>
        <fieldset class="levels">
          <legend>Levels</legend>
          {LEVELS.map((l) => (
            <label class="check">
              <input
                type="checkbox"
                checked={levels.includes(l)}
                onChange={(e) => {
                  const on = (e.target as HTMLInputElement).checked;
                  setParams({ level: (on ? [...levels, l] : levels.filter((x) => x !== l)).join(',') });
                }}
              />
              {l}
            </label>
          ))}
        </fieldset>
        <button type="submit" class="primary">
          Search
        </button>
      </form>
      {tailError && <ErrorBox error={tailError} />}
      <TimeChart label={`Histogram of the ${lines.length} lines shown, over time`} xs={hist.xs} series={series} height={120} />
      <Status r={res} empty={!res.loading && lines.length === 0}>
        No log lines match in this range.
      </Status>
      {lines.length > 0 && (
        <VirtualTable
          label="Log lines"
          rows={lines}
          rowHeight={26}
          onOpen={setOpen}
          rowClass={(l) => 'lvl-' + l.level + (l === open ? ' sel' : '')}
          columns={[
            { label: 'Time', width: '190px', cell: (l) => <span class="muted">{fmtTime(l.timestamp, true)}</span> },
            { label: 'Level', width: '64px', cell: (l) => <span class="level">{l.level}</span> },
            { label: 'Service', width: '120px', cell: (l) => l.service },
            { label: 'Message', width: 'minmax(0, 1fr)', cell: (l) => <span class="msg">{highlight(l.message, words)}</span> },
            {
              label: 'Trace',
              width: '90px',
              cell: (l) => (l.trace_id ? <a href={href(`/traces/${encodeURIComponent(l.trace_id)}`)}>trace</a> : ''),
            },
          ]}
          footer={
            <span>
              {lines.length} lines, newest first; Enter or a click shows a line's details{' '}
              {next && (
                <button type="button" onClick={more}>
                  Load older
                </button>
              )}
            </span>
          }
        />
      )}
      {open && (
        <section class="panel static" aria-label="Log line details">
          <div class="row">
            <h2>Log line</h2>
            <span class="grow" />
            <button type="button" onClick={() => setOpen(null)}>
              Close
            </button>
          </div>
          <dl class="kv">
            <dt>Time</dt>
            <dd>{fmtTime(open.timestamp, true)}</dd>
            <dt>Level</dt>
            <dd>{open.level}</dd>
            <dt>Service</dt>
            <dd>{open.service}</dd>
            <dt>Message</dt>
            <dd class="mono pre">{highlight(open.message, words)}</dd>
            {open.trace_id && (
              <>
                <dt>Trace</dt>
                <dd>
                  <a class="mono" href={href(`/traces/${encodeURIComponent(open.trace_id)}`, { span: open.span_id ?? undefined })}>
                    {open.trace_id}
                  </a>
                </dd>
              </>
            )}
            {Object.entries(open.attributes ?? {}).map(([k, v]) => (
              <>
                <dt class="mono">{k}</dt>
                <dd class="mono pre">{typeof v === 'string' ? v : JSON.stringify(v)}</dd>
              </>
            ))}
          </dl>
        </section>
      )}
    </>
  );
}

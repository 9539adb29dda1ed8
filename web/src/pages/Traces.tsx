import { useMemo, useState } from 'preact/hooks';
import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader, serviceColor } from '../components/page';
import { VirtualTable } from '../components/VirtualTable';
import { fmtDuration, fmtTime, iso, resolveRange, rangeKey } from '../time';
import { href, navigate, setParams } from '../url';
import type { PageProps } from '.';

interface TraceSummary {
  trace_id: string;
  root_service: string;
  root_operation: string;
  start_time: string;
  duration_ms: number;
  span_count: number;
  error_count: number;
  services: string[];
  status: string;
}

export function TraceList({ params }: PageProps) {
  const r = resolveRange(params, '1h');
  const service = params.get('service') ?? '';
  const operation = params.get('operation') ?? '';
  const errorsOnly = params.get('status') === 'error';
  const minDur = params.get('min_duration_ms') ?? '';
  const [pages, setPages] = useState<{ items: TraceSummary[]; next: string | null }>({ items: [], next: null });
  const key = [rangeKey(r), service, operation, errorsOnly, minDur].join('|');
  const query = { from: iso(r.from), to: iso(r.to), service, operation, status: errorsOnly ? 'error' : '', min_duration_ms: minDur, limit: 200 };
  const res = useLoad(
    (signal) =>
      get<{ items: TraceSummary[]; next_cursor: string | null }>('/api/v1/traces', query, signal).then((b) => {
        setPages({ items: b.items, next: b.next_cursor });
        return b;
      }),
    [key],
  );
  const more = async () => {
    if (!pages.next) return;
    const b = await get<{ items: TraceSummary[]; next_cursor: string | null }>('/api/v1/traces', { ...query, cursor: pages.next });
    setPages({ items: [...pages.items, ...b.items], next: b.next_cursor });
  };
  const [form, setForm] = useState({ service, operation, minDur });
  return (
    <>
      <PageHeader title="Traces" params={params} def="1h" onRefresh={res.reload} />
      <form
        class="filters"
        role="search"
        aria-label="Trace filters"
        onSubmit={(e) => {
          e.preventDefault();
          setParams({ service: form.service, operation: form.operation, min_duration_ms: form.minDur });
        }}
      >
        <label>
          Service
          <input data-search value={form.service} placeholder="api, worker" onInput={(e) => setForm({ ...form, service: (e.target as HTMLInputElement).value })} />
        </label>
        <label>
          Root operation
          <input value={form.operation} onInput={(e) => setForm({ ...form, operation: (e.target as HTMLInputElement).value })} />
        </label>
        <label>
          Min duration (ms)
          <input type="number" min={0} step="any" value={form.minDur} class="narrow" onInput={(e) => setForm({ ...form, minDur: (e.target as HTMLInputElement).value })} />
        </label>
        <label class="check">
          <input type="checkbox" checked={errorsOnly} onChange={(e) => setParams({ status: (e.target as HTMLInputElement).checked ? 'error' : undefined })} />
          Errors only
        </label>
        <button type="submit">Apply</button>
      </form>
      <Status r={res} empty={!res.loading && pages.items.length === 0}>
        No traces start in this range{service || operation || errorsOnly || minDur ? ' with these filters' : ''}.
      </Status>
      {pages.items.length > 0 && (
        <VirtualTable
          label="Traces"
          rows={pages.items}
          onOpen={(t) => navigate(href(`/traces/${encodeURIComponent(t.trace_id)}`))}
          rowClass={(t) => (t.error_count ? 'err' : '')}
          columns={[
            { label: 'Start', width: '170px', cell: (t) => fmtTime(t.start_time) },
            { label: 'Root', width: '2fr', cell: (t) => <span><b>{t.root_service || '(no root)'}</b> {t.root_operation}</span> },
            { label: 'Services', width: '2fr', cell: (t) => t.services.map((s) => <span class="chip" style={{ borderColor: serviceColor(s) }}>{s}</span>) },
            { label: 'Spans', width: '70px', align: 'right', cell: (t) => t.span_count },
            { label: 'Errors', width: '70px', align: 'right', cell: (t) => (t.error_count ? <span class="bad">{t.error_count}</span> : 0) },
            { label: 'Duration', width: '100px', align: 'right', cell: (t) => fmtDuration(t.duration_ms) },
            { label: 'Trace id', width: '150px', cell: (t) => <a href={href(`/traces/${encodeURIComponent(t.trace_id)}`)} class="mono">{t.trace_id.slice(0, 16)}</a> },
          ]}
          footer={
            <span>
              {pages.items.length} traces{' '}
              {pages.next && (
                <button type="button" onClick={more}>
                  Load more
                </button>
              )}
            </span>
          }
        />
      )}
    </>
  );
}

interface Span {
  trace_id: string;
  span_id: string;
  parent_span_id: string | null;
  service_name: string;
  operation: string;
  timestamp: string;
  duration_ms: number;
  status: string;
  attributes: Record<string, unknown>;
}

interface Trace {
  trace_id: string;
  start_time: string;
  duration_ms: number;
  services: string[];
  spans: Span[];
}

/** Spans in tree order (children under their parent, by start), with their depth. */
function treeOrder(spans: Span[]): { span: Span; depth: number }[] {
  const ids = new Set(spans.map((s) => s.span_id));
  const children = new Map<string, Span[]>();
  const roots: Span[] = [];
  for (const s of spans) {
    if (s.parent_span_id && ids.has(s.parent_span_id) && s.parent_span_id !== s.span_id) {
      const l = children.get(s.parent_span_id) ?? [];
      l.push(s);
      children.set(s.parent_span_id, l);
    } else roots.push(s);
  }
  const out: { span: Span; depth: number }[] = [];
  const seen = new Set<string>();
  const visit = (s: Span, depth: number) => {
    if (seen.has(s.span_id)) return;
    seen.add(s.span_id);
    out.push({ span: s, depth });
    for (const c of children.get(s.span_id) ?? []) visit(c, depth + 1);
  };
  roots.forEach((s) => visit(s, 0));
  spans.forEach((s) => visit(s, 0)); // cycles: whatever is left
  return out;
}

export function TraceView({ path, params }: PageProps) {
  const id = decodeURIComponent(path.slice('/traces/'.length));
  const trace = useLoad((signal) => get<Trace>(`/api/v1/traces/${encodeURIComponent(id)}`, {}, signal), [id]);
  const selected = params.get('span');
  const t = trace.data;
  const rows = useMemo(() => (t ? treeOrder(t.spans) : []), [t]);
  const start = t ? Date.parse(t.start_time) : 0;
  const total = Math.max(t?.duration_ms ?? 1, 0.001);
  const logs = useLoad(
    (signal) =>
      t ? get<{ items: any[] }>('/api/v1/logs/search', { q: `trace_id:${id}`, from: iso(start - 3_600_000), to: iso(start + total + 3_600_000), limit: 200 }, signal) : null,
    [t],
  );
  const sel = t?.spans.find((s) => s.span_id === selected) ?? null;
  return (
    <>
      <PageHeader title="Trace">
        <code class="muted">{id}</code>
      </PageHeader>
      <Status r={trace} />
      {t && (
        <>
          <p class="summary">
            {fmtTime(t.start_time, true)} · {fmtDuration(t.duration_ms)} · {t.spans.length} spans ·{' '}
            {t.spans.filter((s) => s.status === 'error').length} errors · {t.services.map((s) => <span class="chip" style={{ borderColor: serviceColor(s) }}>{s}</span>)}
          </p>
          <div class="split">
            <div class="waterfall" role="tree" aria-label="Waterfall">
              <div class="wf-head" aria-hidden="true">
                <span>Service · operation</span>
                <span class="wf-scale">
                  {[0, 0.25, 0.5, 0.75, 1].map((f) => (
                    <span style={{ left: `${f * 100}%` }}>{fmtDuration(f * total)}</span>
                  ))}
                </span>
              </div>
              {rows.map(({ span, depth }) => {
                const off = ((Date.parse(span.timestamp) - start) / total) * 100;
                const w = Math.max((span.duration_ms / total) * 100, 0.3);
                const err = span.status === 'error';
                return (
                  <div
                    role="treeitem"
                    aria-level={depth + 1}
                    aria-selected={span.span_id === selected}
                    aria-label={`${span.service_name} ${span.operation}${err ? ', error' : ''}, ${fmtDuration(span.duration_ms)}`}
                    tabIndex={0}
                    class={'wf-row' + (err ? ' err' : '') + (span.span_id === selected ? ' sel' : '')}
                    onClick={() => setParams({ span: span.span_id }, true)}
                    onKeyDown={(e) => {
                      if (e.key === 'Enter' || e.key === ' ') {
                        e.preventDefault();
                        setParams({ span: span.span_id }, true);
                      } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
                        e.preventDefault();
                        const el = e.currentTarget as HTMLElement;
                        ((e.key === 'ArrowDown' ? el.nextElementSibling : el.previousElementSibling) as HTMLElement | null)?.focus();
                      }
                    }}
                  >
                    <span class="wf-name" style={{ paddingLeft: `${depth * 14}px` }}>
                      <span class="dot" style={{ background: serviceColor(span.service_name) }} />
                      <b>{span.service_name}</b> {span.operation}
                    </span>
                    <span class="wf-track">
                      <span class="wf-bar" style={{ left: `${Math.min(off, 99.7)}%`, width: `${w}%`, background: err ? 'var(--bad)' : serviceColor(span.service_name) }} />
                      <span class="wf-dur" style={{ left: `${Math.min(off + w, 88)}%` }}>
                        {fmtDuration(span.duration_ms)}
                      </span>
                    </span>
                  </div>
                );
              })}
            </div>
            <aside class="panel" aria-label="Span details">
              {sel ? (
                <>
                  <h2>
                    {sel.service_name} · {sel.operation}
                  </h2>
                  <dl class="kv">
                    <dt>Status</dt>
                    <dd class={sel.status === 'error' ? 'bad' : ''}>{sel.status}</dd>
                    <dt>Start</dt>
                    <dd>{fmtTime(sel.timestamp, true)}</dd>
                    <dt>Duration</dt>
                    <dd>{fmtDuration(sel.duration_ms)}</dd>
                    <dt>Span id</dt>
                    <dd class="mono">{sel.span_id}</dd>
                    <dt>Parent</dt>
                    <dd class="mono">{sel.parent_span_id ?? '–'}</dd>
                    {Object.entries(sel.attributes ?? {}).map(([k, v]) => (
                      <>
                        <dt class="mono">{k}</dt>
                        <dd class="mono pre">{typeof v === 'string' ? v : JSON.stringify(v)}</dd>
                      </>
                    ))}
                  </dl>
                </>
              ) : (
                <p class="muted">Select a span to see its attributes.</p>
              )}
            </aside>
          </div>
          <h2>Logs of this trace</h2>
          <Status r={logs} empty={!!logs.data && logs.data.items.length === 0}>
            No log lines carry this trace id.
          </Status>
          {logs.data && logs.data.items.length > 0 && (
            <ul class="loglines" aria-label="Logs of this trace">
              {logs.data.items.map((l) => (
                <li class={'lvl-' + l.level}>
                  <span class="muted">{fmtTime(l.timestamp, true)}</span> <span class="level">{l.level}</span> <b>{l.service}</b> {l.message}
                </li>
              ))}
            </ul>
          )}
        </>
      )}
    </>
  );
}

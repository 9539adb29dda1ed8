import { useMemo } from 'preact/hooks';
import { get } from '../api';
import { Status, useLoad } from '../components/data';
import { PageHeader, serviceColor } from '../components/page';
import { fmtDuration, fmtNum, fmtPct, iso, resolveRange, rangeKey } from '../time';
import { href } from '../url';
import type { PageProps } from '.';

interface Node {
  service: string;
  span_count: number;
  error_rate: number;
  p95_ms: number;
}
interface Edge {
  source: string;
  target: string;
  call_count: number;
  error_count: number;
  p95_ms: number;
}

/** Columns by longest path from a caller-less service (cycles broken by visit order). */
function layout(nodes: Node[], edges: Edge[]) {
  const depth = new Map<string, number>(nodes.map((n) => [n.service, 0]));
  for (let round = 0; round < nodes.length; round++) {
    let moved = false;
    for (const e of edges) {
      const d = (depth.get(e.source) ?? 0) + 1;
      if (d > (depth.get(e.target) ?? 0) && d < nodes.length) {
        depth.set(e.target, d);
        moved = true;
      }
    }
    if (!moved) break;
  }
  const cols = new Map<number, string[]>();
  for (const n of nodes) {
    const d = depth.get(n.service)!;
    cols.set(d, [...(cols.get(d) ?? []), n.service]);
  }
  const W = 320;
  const H = 96;
  const pos = new Map<string, { x: number; y: number }>();
  let rows = 1;
  for (const [d, names] of cols) {
    rows = Math.max(rows, names.length);
    names.forEach((s, i) => pos.set(s, { x: 30 + d * W, y: 30 + i * H }));
  }
  return { pos, width: cols.size * W, height: 40 + rows * H };
}

export function ServiceMap({ params }: PageProps) {
  const r = resolveRange(params, '1h');
  const res = useLoad((signal) => get<{ nodes: Node[]; edges: Edge[] }>('/api/v1/service-map', { from: iso(r.from), to: iso(r.to) }, signal), [rangeKey(r)]);
  const nodes = res.data?.nodes ?? [];
  const edges = res.data?.edges ?? [];
  const g = useMemo(() => layout(nodes, edges), [res.data]);
  const bw = 220;
  const bh = 56;
  return (
    <>
      <PageHeader title="Service map" params={params} def="1h" onRefresh={res.reload} />
      <Status r={res} empty={!!res.data && nodes.length === 0}>
        No spans in this range.
      </Status>
      {nodes.length > 0 && (
        <div class="mapwrap">
          <svg width={g.width} height={g.height} role="img" aria-label={`Service map: ${nodes.length} services, ${edges.length} dependencies`}>
            <defs>
              <marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
                <path d="M 0 0 L 10 5 L 0 10 z" fill="var(--muted)" />
              </marker>
            </defs>
            {edges.map((e) => {
              const a = g.pos.get(e.source);
              const b = g.pos.get(e.target);
              if (!a || !b) return null;
              const x1 = a.x + bw, y1 = a.y + bh / 2, x2 = b.x, y2 = b.y + bh / 2;
              const back = x2 <= x1;
              const d = back
                ? `M${a.x + bw / 2},${a.y + bh} C${a.x + bw / 2},${a.y + bh + 40} ${b.x + bw / 2},${b.y + bh + 40} ${b.x + bw / 2},${b.y + bh}`
                : `M${x1},${y1} C${x1 + 40},${y1} ${x2 - 40},${y2} ${x2},${y2}`;
              return (
                <g>
                  <path d={d} fill="none" stroke={e.error_count ? 'var(--bad)' : 'var(--muted)'} stroke-width={1 + Math.min(4, Math.log10(e.call_count + 1))} marker-end="url(#arrow)" />
                  <text x={back ? (a.x + b.x + bw) / 2 : (x1 + x2) / 2} y={back ? Math.max(a.y, b.y) + bh + 36 : (y1 + y2) / 2 - 8} class="edge-label" text-anchor="middle">
                    {fmtNum(e.call_count)} {e.call_count === 1 ? 'call' : 'calls'}{e.error_count ? ` · ${e.error_count} failed` : ''}
                  </text>
                </g>
              );
            })}
            {nodes.map((n) => {
              const p = g.pos.get(n.service)!;
              return (
                <a href={href('/apm', { service: n.service })} aria-label={`${n.service}: ${n.span_count} spans, ${fmtPct(n.error_rate)} errors, p95 ${fmtDuration(n.p95_ms)}`}>
                  <rect x={p.x} y={p.y} width={bw} height={bh} rx="8" class="node" stroke={n.error_rate > 0 ? 'var(--bad)' : serviceColor(n.service)} />
                  <text x={p.x + 10} y={p.y + 20} class="node-title">
                    {n.service}
                  </text>
                  <text x={p.x + 10} y={p.y + 40} class="node-sub">
                    {fmtNum(n.span_count)} spans · {fmtPct(n.error_rate)} errors · p95 {fmtDuration(n.p95_ms)}
                  </text>
                </a>
              );
            })}
          </svg>
        </div>
      )}
      {edges.length > 0 && (
        <table class="plain" aria-label="Dependencies">
          <thead>
            <tr>
              <th>Caller</th>
              <th>Callee</th>
              <th class="num">Calls</th>
              <th class="num">Errors</th>
              <th class="num">p95</th>
            </tr>
          </thead>
          <tbody>
            {edges.map((e) => (
              <tr>
                <td>{e.source}</td>
                <td>{e.target}</td>
                <td class="num">{fmtNum(e.call_count)}</td>
                <td class="num">{fmtNum(e.error_count)}</td>
                <td class="num">{fmtDuration(e.p95_ms)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

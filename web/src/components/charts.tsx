import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { useEffect, useRef } from 'preact/hooks';

export interface Series {
  label: string;
  values: (number | null)[];
  color: string;
  bars?: boolean;
}

const css = (name: string) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

/** A time chart (uPlot); `xs` in epoch milliseconds. A table alternative is the page's job. */
export function TimeChart({ label, xs, series, height = 220, yFormat }: { label: string; xs: number[]; series: Series[]; height?: number; yFormat?: (v: number) => string }) {
  const el = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const host = el.current;
    if (!host) return;
    const axis = { stroke: css('--muted'), grid: { stroke: css('--grid'), width: 1 }, ticks: { stroke: css('--grid') } };
    const opts: uPlot.Options = {
      width: host.clientWidth || 600,
      height,
      legend: { show: series.length > 1 },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [axis, { ...axis, size: 72, values: yFormat ? (_u, vs) => vs.map(yFormat) : undefined }],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          fill: s.bars ? s.color + 'aa' : s.color + '22',
          width: s.bars ? 0 : 2,
          paths: s.bars ? uPlot.paths.bars!({ size: [0.8, 40] }) : undefined,
          // Lines show their points only where they are sparse (uPlot's default); bars never.
          points: s.bars ? { show: false } : undefined,
          spanGaps: false,
        })),
      ],
    };
    const data = [xs.map((x) => x / 1000), ...series.map((s) => s.values)] as uPlot.AlignedData;
    const plot = new uPlot(opts, data, host);
    const ro = new ResizeObserver(() => plot.setSize({ width: host.clientWidth, height }));
    ro.observe(host);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [xs, series, height]);
  return <div class="chart" role="img" aria-label={label} ref={el} />;
}

/** A small line of recent values (SVG). */
export function Sparkline({ label, values, max }: { label: string; values: (number | null)[]; max?: number }) {
  const w = 120;
  const h = 28;
  const vs = values.filter((v): v is number => v !== null);
  if (!vs.length) return <span class="muted">no data</span>;
  const hi = max ?? Math.max(...vs, 1e-9);
  const step = values.length > 1 ? w / (values.length - 1) : w;
  let d = '';
  let pen = false;
  values.forEach((v, i) => {
    if (v === null) {
      pen = false;
      return;
    }
    const y = h - 2 - (v / hi) * (h - 4);
    d += `${pen ? 'L' : 'M'}${(i * step).toFixed(1)},${y.toFixed(1)}`;
    pen = true;
  });
  return (
    <svg class="spark" width={w} height={h} role="img" aria-label={label}>
      <path d={d} fill="none" stroke="var(--accent)" stroke-width="1.5" />
    </svg>
  );
}

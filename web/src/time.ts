// Time ranges: relative ("15m", "1h", "7d": ending now) or absolute (from/to in the URL).

export const RELATIVE = [
  ['5m', 'Last 5 minutes'],
  ['15m', 'Last 15 minutes'],
  ['1h', 'Last hour'],
  ['6h', 'Last 6 hours'],
  ['24h', 'Last 24 hours'],
  ['7d', 'Last 7 days'],
  ['30d', 'Last 30 days'],
] as const;

const UNIT: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

export function rangeMs(r: string): number | null {
  const m = /^(\d+)([mhdw])$/.exec(r);
  return m ? Number(m[1]) * UNIT[m[2]] : null;
}

export interface Range {
  from: number;
  to: number;
  label: string;
  relative: string | null;
}

/** The page's range from the URL, `def` (relative) when it has none. */
export function resolveRange(params: URLSearchParams, def: string): Range {
  const from = params.get('from');
  const to = params.get('to');
  if (from && to && !isNaN(Date.parse(from)) && !isNaN(Date.parse(to))) {
    return { from: Date.parse(from), to: Date.parse(to), label: `${fmtTime(Date.parse(from))} – ${fmtTime(Date.parse(to))}`, relative: null };
  }
  const r = params.get('range') ?? def;
  const ms = rangeMs(r) ?? rangeMs(def)!;
  const now = Date.now();
  return { from: now - ms, to: now, label: RELATIVE.find(([k]) => k === r)?.[1] ?? `Last ${r}`, relative: r };
}

export const iso = (ms: number) => new Date(ms).toISOString();

const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** Local time, `2026-11-22 10:15:30`. */
export function fmtTime(t: number | string, millis = false): string {
  const d = new Date(t);
  if (isNaN(d.getTime())) return String(t);
  const s = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return millis ? `${s}.${pad(d.getMilliseconds(), 3)}` : s;
}

export function fmtDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || isNaN(ms)) return '–';
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 1000) return `${ms < 10 ? ms.toFixed(2) : ms.toFixed(1)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(2)} s`;
  return `${(ms / 60_000).toFixed(1)} min`;
}

export function fmtNum(n: number | null | undefined, digits = 0): string {
  if (n === null || n === undefined || isNaN(n)) return '–';
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

export const fmtPct = (r: number | null | undefined, digits = 1) =>
  r === null || r === undefined || isNaN(r) ? '–' : `${(r * 100).toFixed(digits)}%`;

export function fmtBytes(b: number | null | undefined): string {
  if (b === null || b === undefined) return '–';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (b >= 1000 && i < units.length - 1) {
    b /= 1000;
    i++;
  }
  return `${b.toFixed(i ? 1 : 0)} ${units[i]}`;
}

/** What identifies a range for reloading: a relative one is the same range as time passes (it
 * moves on with Refresh), so that a page does not refetch on every render. */
export const rangeKey = (r: Range): string => r.relative ?? `${r.from}-${r.to}`;

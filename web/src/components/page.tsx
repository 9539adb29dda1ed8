import type { ComponentChildren } from 'preact';
import { TimeRangePicker } from './TimeRange';

export function PageHeader({ title, params, def, onRefresh, children }: { title: string; params?: URLSearchParams; def?: string; onRefresh?: () => void; children?: ComponentChildren }) {
  return (
    <div class="pagehead">
      <h1>{title}</h1>
      {children}
      <span class="grow" />
      {params && def ? (
        <TimeRangePicker params={params} def={def} onRefresh={onRefresh} />
      ) : (
        onRefresh && (
          <button type="button" onClick={onRefresh} aria-label="Refresh" title="Refresh">
            ↻
          </button>
        )
      )}
    </div>
  );
}

/** Colour of a service, stable across pages. */
export function serviceColor(name: string): string {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return `hsl(${h % 360} 65% 55%)`;
}

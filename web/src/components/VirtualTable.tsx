// A table that renders only the rows in view, so 100k rows scroll smoothly. ARIA table roles
// with row indexes; rows with an action are focusable, arrows move between them.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

export interface Column<T> {
  label: string;
  width?: string; // CSS grid track, default 1fr
  align?: 'right';
  cell: (row: T) => ComponentChildren;
}

interface Props<T> {
  label: string;
  columns: Column<T>[];
  rows: T[];
  rowHeight?: number;
  maxHeight?: number;
  onOpen?: (row: T) => void;
  rowClass?: (row: T) => string;
  footer?: ComponentChildren;
}

export function VirtualTable<T>({ label, columns, rows, rowHeight = 30, maxHeight = 560, onOpen, rowClass, footer }: Props<T>) {
  const scroller = useRef<HTMLDivElement>(null);
  const [top, setTop] = useState(0);
  const [viewH, setViewH] = useState(maxHeight);
  useEffect(() => {
    const el = scroller.current;
    if (!el) return;
    const ro = new ResizeObserver(() => setViewH(el.clientHeight || maxHeight));
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  const grid = columns.map((c) => c.width ?? '1fr').join(' ');
  const overscan = 8;
  const first = Math.max(0, Math.floor(top / rowHeight) - overscan);
  const last = Math.min(rows.length, Math.ceil((top + viewH) / rowHeight) + overscan);
  const height = Math.min(maxHeight, rows.length * rowHeight + 2);

  const onKey = (e: KeyboardEvent, i: number) => {
    if (e.key === 'Enter' && onOpen) {
      e.preventDefault();
      onOpen(rows[i]);
    } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const next = Math.max(0, Math.min(rows.length - 1, i + (e.key === 'ArrowDown' ? 1 : -1)));
      const el = scroller.current!;
      const y = next * rowHeight;
      if (y < el.scrollTop) el.scrollTop = y;
      else if (y + rowHeight > el.scrollTop + el.clientHeight) el.scrollTop = y + rowHeight - el.clientHeight;
      requestAnimationFrame(() => (el.querySelector(`[aria-rowindex="${next + 2}"]`) as HTMLElement | null)?.focus());
    }
  };

  return (
    <div class="vtable" role="table" aria-label={label} aria-rowcount={rows.length + 1}>
      <div class="vrow vhead" role="row" aria-rowindex={1} style={{ gridTemplateColumns: grid }}>
        {columns.map((c) => (
          <div role="columnheader" class={c.align === 'right' ? 'num' : ''}>
            {c.label}
          </div>
        ))}
      </div>
      <div class="vbody" ref={scroller} style={{ height }} onScroll={(e) => setTop((e.target as HTMLDivElement).scrollTop)}>
        <div style={{ height: rows.length * rowHeight, position: 'relative' }}>
          {rows.slice(first, last).map((r, k) => {
            const i = first + k;
            return (
              <div
                key={i}
                class={'vrow' + (onOpen ? ' clickable' : '') + (rowClass ? ' ' + rowClass(r) : '')}
                role="row"
                aria-rowindex={i + 2}
                tabIndex={onOpen ? 0 : undefined}
                style={{ gridTemplateColumns: grid, top: i * rowHeight, height: rowHeight }}
                onClick={onOpen ? () => onOpen(r) : undefined}
                onKeyDown={(e) => onKey(e, i)}
              >
                {columns.map((c) => (
                  <div role="cell" class={c.align === 'right' ? 'num' : ''}>
                    {c.cell(r)}
                  </div>
                ))}
              </div>
            );
          })}
        </div>
      </div>
      {footer && <div class="vfoot">{footer}</div>}
    </div>
  );
}

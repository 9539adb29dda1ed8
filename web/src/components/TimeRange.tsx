import { useState } from 'preact/hooks';
import { RELATIVE, resolveRange } from '../time';
import { setParams } from '../url';

const toLocalInput = (ms: number) => {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60_000);
  return d.toISOString().slice(0, 16);
};

/** Relative ranges, or an absolute one; kept in the URL (`range`, or `from` and `to`). */
export function TimeRangePicker({ params, def, onRefresh }: { params: URLSearchParams; def: string; onRefresh?: () => void }) {
  const r = resolveRange(params, def);
  const [custom, setCustom] = useState(false);
  const [from, setFrom] = useState(toLocalInput(r.from));
  const [to, setTo] = useState(toLocalInput(r.to));
  const value = custom || !r.relative ? 'custom' : r.relative;
  const options: [string, string][] = RELATIVE.map(([k, l]) => [k, l]);
  if (r.relative && !options.some(([k]) => k === r.relative)) options.push([r.relative, r.label]);
  return (
    <div class="timerange" role="group" aria-label="Time range">
      <label>
        <span class="sr-only">Time range</span>
        <select
          aria-label="Time range"
          value={value}
          onChange={(e) => {
            const v = (e.target as HTMLSelectElement).value;
            if (v === 'custom') setCustom(true);
            else {
              setCustom(false);
              setParams({ range: v, from: undefined, to: undefined });
            }
          }}
        >
          {options.map(([k, label]) => (
            <option value={k}>{label}</option>
          ))}
          <option value="custom">{r.relative ? 'Custom…' : r.label}</option>
        </select>
      </label>
      {value === 'custom' && (
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            const f = new Date(from).getTime();
            const t = new Date(to).getTime();
            if (f < t) {
              setCustom(false);
              setParams({ range: undefined, from: new Date(f).toISOString(), to: new Date(t).toISOString() });
            }
          }}
        >
          <label>
            From <input type="datetime-local" value={from} onInput={(e) => setFrom((e.target as HTMLInputElement).value)} />
          </label>
          <label>
            To <input type="datetime-local" value={to} onInput={(e) => setTo((e.target as HTMLInputElement).value)} />
          </label>
          <button type="submit">Apply</button>
        </form>
      )}
      {onRefresh && (
        <button type="button" onClick={onRefresh} aria-label="Refresh" title="Refresh">
          ↻
        </button>
      )}
    </div>
  );
}

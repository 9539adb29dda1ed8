//! Rows applied since the last flush. Readers see them at once; a flush freezes the buffer
//! and writes it out as segments.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};
use sextant_model::row::{Encoded, RowBatch};
use sextant_proto::convert::persist_row::{decode_ingest, DecodeError};

use super::event_columns::EventColumns;
use super::rollup::Running;
use super::table::{Row, RowRef, Table};
use super::token_index::line_terms;
use super::user_number::{id_hash, UserNumbers, USER};

pub struct BufferedRow {
    pub project: Arc<str>,
    pub row: Row,
    pub batch_id: u128,
    /// A log line's index terms ([`line_terms`], sorted, unique): its segment's token index
    /// takes them at flush instead of tokenizing the line again.
    pub terms: Box<[u32]>,
}

pub struct Buffer {
    pub rows: Vec<BufferedRow>,
    /// Hash of (project, trace id) -> positions of its spans in `rows`; readers check the ids
    /// of the rows it points to (a hash shared by two traces only costs a comparison).
    traces: FxHashMap<u64, Vec<u32>>,
    /// Per batch of log lines, the lines holding each index term (the terms [`line_terms`]
    /// gives segments' token indexes); hash of (project, event name) -> positions of its
    /// events. Rising positions; a shared hash only costs reading a row that the scan's mask
    /// then rejects.
    terms: Vec<Postings>,
    events: FxHashMap<u64, Vec<u32>>,
    /// Hash of (project, hostname) -> positions of its host samples, as for events.
    hosts: FxHashMap<u64, Vec<u32>>,
    /// Each batch's rows of each table, with the span of their times: a scan without an
    /// index walks only the runs of its table that overlap its range, an estimate only those
    /// crossing the range's ends.
    runs: Vec<Run>,
    /// Span, event and host rollups of the rows here, brought up to date by the reads that
    /// use them (applying a row does not pay for them).
    rollups: Mutex<Rolled>,
    /// The user number of each row (events; `u32::MAX` for others), as far as the scans that
    /// read user numbers have brought it (applying a row does not pay for it).
    users: Mutex<Vec<u32>>,
    /// Events' times and names as columns, as far as the scans that use them have brought
    /// them (applying a row does not pay for them either).
    event_columns: Mutex<EventColumns>,
    batches: HashSet<u128>,
    /// Per (project, table) with rows here: how many and their earliest and latest time, so
    /// that an estimate whose range holds them all does not walk the rows.
    extents: FxHashMap<(Arc<str>, Table), Extent>,
    /// Batches aborted while still here: skipped by reads and by the flush.
    pub aborted: HashSet<u128>,
    /// Approximate heap size, for flush-by-size.
    pub bytes: usize,
    /// When the first row came, on the shard's monotonic clock: for flush-by-age.
    pub since: Duration,
}

impl Default for Buffer {
    fn default() -> Self {
        Self {
            rows: Vec::new(),
            traces: FxHashMap::default(),
            terms: Vec::new(),
            events: FxHashMap::default(),
            hosts: FxHashMap::default(),
            runs: Vec::new(),
            rollups: Mutex::default(),
            users: Mutex::default(),
            event_columns: Mutex::default(),
            batches: HashSet::new(),
            extents: FxHashMap::default(),
            aborted: HashSet::new(),
            bytes: 0,
            since: Duration::ZERO,
        }
    }
}

impl Buffer {
    /// An empty buffer with room for `rows` rows of `traces` traces.
    pub fn with_capacity(rows: usize, traces: usize) -> Self {
        let mut buffer = Buffer::default();
        buffer.rows.reserve_exact(rows);
        buffer.traces.reserve(traces);
        buffer
    }

    /// How many traces have spans here.
    pub fn trace_count(&self) -> usize {
        self.traces.len()
    }

    /// Adds a batch; `now` is the shard clock's monotonic reading.
    pub fn push(&mut self, batch_id: u128, batch: RowBatch<Encoded>, encoded_len: usize, now: Duration) -> u64 {
        if self.rows.is_empty() {
            self.since = now;
        }
        let project: Arc<str> = Arc::from(batch.project_id.as_str());
        let before = self.rows.len();
        let mut index_bytes = 0;
        let mut line = Vec::new();
        // (term, line) pairs as `term << 32 | line`: sorted as one integer. Room for 16 terms
        // a line (a message of a dozen words and a few attributes); more only grows it.
        let mut postings: Vec<u64> = Vec::with_capacity(batch.logs.len() * 16);
        // Per table of the batch: its first position and the extent of its rows.
        let mut extents: Vec<(Table, u32, Extent)> = Vec::new();
        let rows = batch
            .spans
            .into_iter()
            .map(Row::Span)
            .chain(batch.logs.into_iter().map(Row::Log))
            .chain(batch.host_metrics.into_iter().map(Row::HostMetric))
            .chain(batch.events.into_iter().map(Row::Event))
            .chain(batch.replay_events.into_iter().map(Row::Replay));
        for row in rows {
            let position = self.rows.len() as u32;
            let mut terms = Box::default();
            match &row {
                Row::Span(s) => self.traces.entry(trace_key(&project, &s.trace_id)).or_default().push(position),
                Row::Log(l) => {
                    line.clear();
                    line_terms(l, &mut line);
                    line.sort_unstable();
                    line.dedup();
                    postings.extend(line.iter().map(|&term| u64::from(term) << 32 | u64::from(position)));
                    index_bytes += line.len() * 4;
                    terms = line.as_slice().into();
                }
                Row::Event(e) => index_bytes += post(&mut self.events, trace_key(&project, &e.event), position),
                Row::HostMetric(m) => index_bytes += post(&mut self.hosts, trace_key(&project, &m.hostname), position),
                _ => {}
            }
            let (table, t) = (row.table(), row.time_ns());
            match extents.iter_mut().find(|(x, _, _)| *x == table) {
                Some((_, _, e)) => e.add(1, t, t),
                None => extents.push((table, position, Extent { rows: 1, min_ns: t, max_ns: t })),
            }
            self.rows.push(BufferedRow { project: project.clone(), row, batch_id, terms });
        }
        if !postings.is_empty() {
            let batch = Postings::new(project.clone(), postings);
            index_bytes += batch.heap_bytes();
            self.terms.push(batch);
        }
        for (table, first, e) in extents {
            // A batch's rows come table by table (the chain above): each table's are consecutive.
            let positions = first..first + e.rows as u32;
            self.runs.push(Run { project: project.clone(), table, positions, min_ns: e.min_ns, max_ns: e.max_ns });
            index_bytes += std::mem::size_of::<Run>();
            let entry = self.extents.entry((project.clone(), table));
            entry.and_modify(|x| x.add(e.rows, e.min_ns, e.max_ns)).or_insert(e);
        }
        self.batches.insert(batch_id);
        // Spans take about three times their protobuf size (docs/BENCHMARKS.md, "Attributes
        // in one buffer per batch"): their strings, their attributes, the row itself.
        self.bytes += encoded_len * 3 + index_bytes;
        (self.rows.len() - before) as u64
    }

    pub fn contains(&self, batch_id: u128) -> bool {
        self.batches.contains(&batch_id)
    }

    /// The projects with rows here (once per table holding some).
    pub fn projects(&self) -> impl Iterator<Item = &str> {
        self.extents.keys().map(|(p, _)| &**p)
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Spans of one trace, except those of aborted batches and of `hidden` ones.
    pub fn trace(&self, project: &str, trace_id: &str, hidden: &dyn Fn(u128) -> bool) -> Vec<Row> {
        self.traces
            .get(&trace_key(project, trace_id))
            .into_iter()
            .flatten()
            .map(|&i| &self.rows[i as usize])
            .filter(|r| *r.project == *project && matches!(&r.row, Row::Span(s) if s.trace_id == trace_id))
            .filter(|r| !self.aborted.contains(&r.batch_id) && !hidden(r.batch_id))
            .map(|r| r.row.clone())
            .collect()
    }

    /// The live rows of `project` in `table` (trace summaries: derived from its spans), as
    /// record batches ready for [`Scan::apply`](super::Scan::apply). A rollup scan gets the
    /// [`running_rollups`](Self::running_rollups), or the source rows when there are none or a
    /// hidden batch is here (the rollups still count it).
    /// `users`: the shard's user numbers, given for a scan that returns them.
    pub fn scan_rows(
        &self,
        scan: &super::Scan,
        hidden: &dyn Fn(u128) -> bool,
        users: Option<&UserNumbers>,
    ) -> Vec<arrow_array::RecordBatch> {
        let Some(source) = scan.rollup_source() else {
            if let Some(batches) = self.scan_event_columns(scan, hidden, users) {
                return batches;
            }
            return self.scan_from(self.candidates(scan), scan, hidden, users);
        };
        let rolled = if self.batches.iter().any(|&b| hidden(b)) { None } else { self.running_rollups(scan.table) };
        let Some(rolled) = rolled else {
            return self.scan_from(self.candidates(&source), &source, hidden, None);
        };
        // A bucket starting in the source range holds only rows of that range (its ends are
        // bucket starts), so these are the rollups of the rows it selects.
        let rows = rolled.rows(scan.table, &scan.project, &scan.rollup_names(), source.from_ns, source.to_ns);
        let refs: Vec<RowRef<'_>> = rows.refs().into_iter().map(|row| RowRef::new(&scan.project, row, 0)).collect();
        scan.select(&refs, None)
    }

    /// [`scan_rows`](Self::scan_rows) reading every row, not the index's candidates.
    #[cfg(test)]
    pub fn scan_rows_unindexed(
        &self,
        scan: &super::Scan,
        hidden: &dyn Fn(u128) -> bool,
    ) -> Vec<arrow_array::RecordBatch> {
        self.scan_from(Box::new(0..self.rows.len() as u32), scan, hidden, None)
    }

    fn scan_from(
        &self,
        positions: Box<dyn Iterator<Item = u32> + '_>,
        scan: &super::Scan,
        hidden: &dyn Fn(u128) -> bool,
        users: Option<&UserNumbers>,
    ) -> Vec<arrow_array::RecordBatch> {
        let source = scan.table.source();
        let mut live: Vec<u32> = positions
            .filter(|&i| {
                let r = &self.rows[i as usize];
                r.row.table() == source
                    && *r.project == *scan.project
                    && scan.may_select(&r.row)
                    && !self.aborted.contains(&r.batch_id)
                    && !hidden(r.batch_id)
            })
            .collect();
        if scan.filter.newest_per_host {
            live = self.newest_per_host(live);
        }
        if live.is_empty() {
            return Vec::new();
        }
        if scan.table == Table::TraceSummaries {
            live.sort_by(|&a, &b| self.rows[a as usize].row.sort_key().cmp(&self.rows[b as usize].row.sort_key()));
        }
        let refs: Vec<RowRef<'_>> = live
            .iter()
            .map(|&i| {
                let r = &self.rows[i as usize];
                RowRef::new(&r.project, &r.row, 0)
            })
            .collect();
        // The rows are of the scan's project and none is hidden (filtered above).
        if scan.table == Table::TraceSummaries {
            return super::summary::select_summaries(scan, &refs);
        }
        match users {
            Some(users) => {
                let numbers = self.user_numbers(users);
                let of_live: Vec<u32> = live.iter().map(|&i| numbers[i as usize]).collect();
                drop(numbers);
                scan.select(&refs, Some(&of_live))
            }
            None => scan.select(&refs, None),
        }
    }

    /// [`scan_rows`](Self::scan_rows) of events from the [`EventColumns`], for a scan that
    /// reads only times, names (as a dictionary, if returned) and user numbers; `None` for
    /// others, and while a batch here is aborted or hidden.
    fn scan_event_columns(
        &self,
        scan: &super::Scan,
        hidden: &dyn Fn(u128) -> bool,
        users: Option<&UserNumbers>,
    ) -> Option<Vec<arrow_array::RecordBatch>> {
        if scan.table != Table::Events {
            return None;
        }
        let columns = scan.read_columns(true, true)?;
        let fits = columns.iter().all(|c| EventColumns::builds(c))
            && (!scan.returns(USER) || users.is_some())
            && (!scan.returns("event") || scan.dictionaries.contains(&"event"));
        if !fits || !self.aborted.is_empty() || self.batches.iter().any(|&b| hidden(b)) {
            return None;
        }
        let numbers = users.filter(|_| scan.returns(USER)).map(|users| self.user_numbers(users));
        let mut events = self.event_columns.lock().unwrap();
        events.extend(&self.rows);
        let range = (scan.from_ns, scan.to_ns);
        let batches = events.select(
            self.candidates(scan),
            &scan.project,
            &scan.filter.events,
            range,
            numbers.as_deref().map(Vec::as_slice),
        );
        let kept = batches.iter().map(|rb| scan.apply(rb, &|_| false).expect("filtering a batch of its own schema"));
        Some(kept.flatten().collect())
    }

    /// Of host samples at `positions`, each host's newest (the first of equal times), in
    /// buffer order.
    fn newest_per_host(&self, positions: Vec<u32>) -> Vec<u32> {
        let mut newest: FxHashMap<&str, (i64, u32)> = FxHashMap::default();
        for i in positions {
            if let Row::HostMetric(m) = &self.rows[i as usize].row {
                let e = newest.entry(&m.hostname).or_insert((m.unix_nanos, i));
                if m.unix_nanos > e.0 {
                    *e = (m.unix_nanos, i);
                }
            }
        }
        let mut kept: Vec<u32> = newest.into_values().map(|(_, i)| i).collect();
        kept.sort_unstable();
        kept
    }

    /// The user number of every row (see `users`), brought up to date through `users`.
    fn user_numbers(&self, users: &UserNumbers) -> MutexGuard<'_, Vec<u32>> {
        let mut numbers = self.users.lock().unwrap();
        let from = numbers.len();
        let new = &self.rows[from..];
        let (positions, hashes): (Vec<usize>, Vec<u128>) = new
            .iter()
            .enumerate()
            .filter_map(|(k, r)| match &r.row {
                Row::Event(e) => Some((from + k, id_hash(&e.distinct_id))),
                _ => None,
            })
            .unzip();
        numbers.resize(self.rows.len(), u32::MAX);
        for (i, n) in positions.into_iter().zip(users.numbers(&hashes)) {
            numbers[i] = n;
        }
        numbers
    }

    /// Rows of `project` that [`scan_rows`](Self::scan_rows) would consider (by table, time
    /// and event name, without building them), and their share of the buffer's bytes.
    pub fn estimate(&self, scan: &super::Scan) -> (u64, u64) {
        let source = scan.table.source();
        let share = |rows: u64| (rows, (self.bytes as u128 * rows as u128 / self.rows.len().max(1) as u128) as u64);
        let Some(extent) = self.extents.get(&(Arc::from(scan.project.as_str()), source)) else {
            return (0, 0);
        };
        // Every row of the table is in the range (or the scan does not select by time): no
        // need to look at them one by one.
        let all_in_range =
            (scan.from_ns <= extent.min_ns && extent.max_ns < scan.to_ns) || scan.table == Table::TraceSummaries;
        let by_name = source == Table::Events && !scan.filter.events.is_empty();
        let by_host = source == Table::HostMetrics && scan.filter.hostname.is_some();
        if all_in_range && !by_name && !by_host {
            return share(extent.rows);
        }
        // The named events or the host's samples only, through the index (a name whose key
        // another name shares counts its rows too: an estimate may be high, never low).
        let rows = match (by_name, by_host) {
            (true, _) if all_in_range => self.named_events(scan).count(),
            (true, _) => self.named_events(scan).filter(|&i| scan.may_select(&self.rows[i as usize].row)).count(),
            (_, true) if all_in_range => self.host_samples(scan).len(),
            (_, true) => self
                .host_samples(scan)
                .iter()
                .filter(|&&i| {
                    let r = &self.rows[i as usize];
                    *r.project == *scan.project && scan.may_select(&r.row)
                })
                .count(),
            _ => self.runs(scan).map(|r| r.rows_in(scan, &self.rows)).sum(),
        };
        share(rows as u64)
    }

    /// Positions the event index lists under the scan's event names, each name once (rows of
    /// two names sharing a key come once per name, unordered).
    fn named_events<'a>(&'a self, scan: &super::Scan) -> impl Iterator<Item = u32> + 'a {
        let mut names: Vec<&String> = scan.filter.events.iter().collect();
        names.sort_unstable();
        names.dedup();
        let keys: Vec<u64> = names.into_iter().map(|e| trace_key(&scan.project, e)).collect();
        keys.into_iter().filter_map(|k| self.events.get(&k)).flatten().copied()
    }

    /// Positions of the samples of the scan's host (and of any host whose key it shares).
    fn host_samples(&self, scan: &super::Scan) -> &[u32] {
        let key = scan.filter.hostname.as_ref().map(|h| trace_key(&scan.project, h));
        key.and_then(|k| self.hosts.get(&k)).map_or(&[], Vec::as_slice)
    }

    /// The rows a scan has to look at, in buffer order: for a log search with index terms,
    /// the lines holding all of them; for events of given names, those events; for one
    /// host's samples, those; otherwise the rows of its table's runs overlapping its range.
    fn candidates<'a>(&'a self, scan: &'a super::Scan) -> Box<dyn Iterator<Item = u32> + 'a> {
        let positions = match scan.table {
            Table::Logs => {
                let terms = scan.required_terms();
                if terms.is_empty() {
                    None
                } else {
                    let batches = self.terms.iter().filter(|b| *b.project == *scan.project);
                    Some(batches.flat_map(|b| intersect(terms.iter().map(|&t| b.lines(t)).collect())).collect())
                }
            }
            Table::Events if !scan.filter.events.is_empty() => {
                let mut all: Vec<u32> = self.named_events(scan).collect();
                all.sort_unstable();
                all.dedup();
                Some(all)
            }
            Table::HostMetrics if scan.filter.hostname.is_some() => {
                return Box::new(self.host_samples(scan).iter().copied());
            }
            _ => None,
        };
        match positions {
            Some(p) => Box::new(p.into_iter()),
            None => Box::new(self.runs(scan).flat_map(|r| r.positions.clone())),
        }
    }

    /// The runs of the scan's table and project that may hold rows of its range (every run
    /// of spans for trace summaries, which are derived from whole traces).
    fn runs<'a>(&'a self, scan: &'a super::Scan) -> impl Iterator<Item = &'a Run> + 'a {
        let (source, any_time) = (scan.table.source(), scan.table == Table::TraceSummaries);
        self.runs.iter().filter(move |r| {
            r.table == source
                && *r.project == *scan.project
                && (any_time || (r.max_ns >= scan.from_ns && r.min_ns < scan.to_ns))
        })
    }

    /// The rollups of every row here, brought up to date, when those of `table` are the ones
    /// a flush writes (no batch was aborted here) and they pay (see [`Running`]).
    pub fn running_rollups(&self, table: Table) -> Option<RollupsRead<'_>> {
        if !self.aborted.is_empty() {
            return None;
        }
        let mut rolled = self.rollups.lock().unwrap();
        let Rolled { covered, running } = &mut *rolled;
        for r in &self.rows[*covered..] {
            running.add(&r.project, &r.row);
        }
        *covered = self.rows.len();
        rolled.running.pays(table).then_some(RollupsRead(rolled))
    }

    /// The live rows grouped by (table, time bucket), each group sorted in segment order,
    /// with the list of batch ids the rows' ordinals point into.
    pub fn time_buckets(&self) -> Vec<(Table, i64, Vec<RowRef<'_>>, Vec<u128>)> {
        let mut groups: FxHashMap<(Table, i64), Vec<&BufferedRow>> = FxHashMap::default();
        for r in self.rows.iter().filter(|r| !self.aborted.contains(&r.batch_id)) {
            groups.entry((r.row.table(), bucket_start(r.row.table(), r.row.time_ns()))).or_default().push(r);
        }
        let mut out: Vec<_> = groups
            .into_iter()
            .map(|((table, hour), mut rows)| {
                sort_for_segment(&mut rows);
                let mut ordinals: FxHashMap<u128, u32> = FxHashMap::default();
                let mut batches = Vec::new();
                let refs = rows
                    .into_iter()
                    .map(|r| {
                        let batch = *ordinals.entry(r.batch_id).or_insert_with(|| {
                            batches.push(r.batch_id);
                            (batches.len() - 1) as u32
                        });
                        RowRef { terms: Some(&r.terms), ..RowRef::new(&r.project, &r.row, batch) }
                    })
                    .collect();
                (table, hour, refs, batches)
            })
            .collect();
        out.sort_by_key(|(t, h, _, _)| (*t, *h));
        out
    }
}

/// The rows of a buffer its rollups cover so far.
#[derive(Default)]
struct Rolled {
    covered: usize,
    running: Running,
}

/// A buffer's running rollups, held while read.
pub struct RollupsRead<'a>(MutexGuard<'a, Rolled>);

impl std::ops::Deref for RollupsRead<'_> {
    type Target = Running;

    fn deref(&self) -> &Running {
        &self.0.running
    }
}

/// Bytes of a row's sort text compared without reaching the row (trace ids are 32).
const SORT_HEAD: usize = 32;

/// A row's place in a segment, gathered once for sorting.
struct SortKey {
    project: u32,
    /// The sort text's first bytes, padded with zeros, as big-endian words: they order as the
    /// bytes do, and compare inline where bytes called `memcmp`.
    head: [u64; SORT_HEAD / 8],
    len: u32,
    time: i64,
    position: u32,
}

/// Sorts rows as a segment stores them: by project, then [`Row::sort_key`], in buffer order
/// among equals. The keys are gathered once, then sorted: comparing through every row's
/// pointers missed the cache at each comparison (a sixth of a flush of log lines).
fn sort_for_segment(rows: &mut Vec<&BufferedRow>) {
    // Distinct first: a buffer holds few projects, and sorting every row's name would compare
    // through the rows' pointers again.
    let mut projects: Vec<&str> = rows.iter().map(|r| &*r.project).collect::<FxHashSet<_>>().into_iter().collect();
    projects.sort_unstable();
    let rank: FxHashMap<&str, u32> = projects.iter().enumerate().map(|(i, p)| (*p, i as u32)).collect();
    let mut any_text = false;
    let keys: Vec<SortKey> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (text, time) = r.row.sort_key();
            any_text |= !text.is_empty();
            let mut bytes = [0u8; SORT_HEAD];
            let n = text.len().min(SORT_HEAD);
            bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
            let head = std::array::from_fn(|w| u64::from_be_bytes(bytes[w * 8..][..8].try_into().expect("8 bytes")));
            let len = u32::try_from(text.len()).unwrap_or(u32::MAX);
            SortKey { project: rank[&*r.project], head, len, time, position: i as u32 }
        })
        .collect();
    if !any_text {
        // (project, time, position) as one integer each: sorted without a comparison function.
        let mut ordered: Vec<u128> = keys
            .iter()
            .map(|k| u128::from(k.project) << 96 | u128::from(k.time as u64 ^ 1 << 63) << 32 | u128::from(k.position))
            .collect();
        ordered.sort_unstable();
        *rows = ordered.iter().map(|&k| rows[k as u32 as usize]).collect();
        return;
    }
    // Different heads order as their texts do; equal heads are equal texts when both fit
    // whole and have one length, and otherwise the texts are compared.
    let full = |a: &SortKey, b: &SortKey| {
        (a.project, a.head).cmp(&(b.project, b.head)).then_with(|| {
            let fit = a.len == b.len && a.len as usize <= SORT_HEAD;
            let text = |k: &SortKey| rows[k.position as usize].row.sort_key().0;
            let texts = if fit { std::cmp::Ordering::Equal } else { text(a).cmp(text(b)) };
            texts.then((a.time, a.position).cmp(&(b.time, b.position)))
        })
    };
    // First by the project's rank and the text's first 12 bytes, in two words: entries a
    // third the size of the keys, compared in two steps. Then each run tying there in full
    // (mostly one user's events, or one trace's spans).
    let mut order: Vec<(u64, u64, u32)> = keys
        .iter()
        .map(|k| (u64::from(k.project) << 32 | k.head[0] >> 32, k.head[0] << 32 | k.head[1] >> 32, k.position))
        .collect();
    order.sort_unstable_by_key(|&(high, low, _)| (high, low));
    for run in order.chunk_by_mut(|a, b| (a.0, a.1) == (b.0, b.1)).filter(|run| run.len() > 1) {
        run.sort_unstable_by(|a, b| full(&keys[a.2 as usize], &keys[b.2 as usize]));
    }
    *rows = order.iter().map(|&(_, _, position)| rows[position as usize]).collect();
}

/// Decodes an ingest payload for [`Buffer::push`], each attribute checked to be one in the
/// form prost writes (see [`super::attribute`]).
pub fn decode_batch(payload: bytes::Bytes) -> Result<RowBatch<Encoded>, DecodeError> {
    let mut batch = decode_ingest(payload)?;
    let attributes = (batch.spans.iter_mut().map(|s| &mut s.attributes))
        .chain(batch.logs.iter_mut().map(|l| &mut l.attributes))
        .chain(batch.host_metrics.iter_mut().map(|m| &mut m.attributes));
    for a in attributes {
        super::attribute::canonicalize(a)?;
    }
    Ok(batch)
}

/// Appends `position` to `key`'s list; returns the bytes that took (a new key's entry and
/// list, or one position at the list's grown capacity).
fn post(index: &mut FxHashMap<u64, Vec<u32>>, key: u64, position: u32) -> usize {
    match index.entry(key) {
        std::collections::hash_map::Entry::Occupied(mut e) => {
            e.get_mut().push(position);
            8
        }
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(vec![position]);
            64
        }
    }
}

/// The positions in every one of `lists` (each rising), shortest list first.
fn intersect(mut lists: Vec<&[u32]>) -> Vec<u32> {
    lists.sort_by_key(|l| l.len());
    let Some((first, rest)) = lists.split_first() else { return Vec::new() };
    first.iter().copied().filter(|p| rest.iter().all(|l| l.binary_search(p).is_ok())).collect()
}

/// Sorts `items` by their high 32 bits, keeping the order of equals: a least-significant-digit
/// radix sort in three passes of 11 bits, or a comparison sort for fewer items than a pass
/// has counters.
fn sort_by_high_half(items: &mut Vec<u64>) {
    const BITS: u32 = 11;
    if items.len() < 1 << BITS {
        items.sort_by_key(|x| x >> 32);
        return;
    }
    let mut spare = vec![0u64; items.len()];
    let mut starts = vec![0usize; 1 << BITS];
    for shift in [32, 32 + BITS, 32 + 2 * BITS] {
        let digit = |x: u64| ((x >> shift) & ((1 << BITS) - 1)) as usize;
        starts.fill(0);
        for &x in items.iter() {
            starts[digit(x)] += 1;
        }
        let mut at = 0;
        for start in &mut starts {
            (*start, at) = (at, at + *start);
        }
        for &x in items.iter() {
            let d = digit(x);
            spare[starts[d]] = x;
            starts[d] += 1;
        }
        std::mem::swap(items, &mut spare);
    }
}

/// The log lines of one batch holding each index term. Built by sorting the batch's (term,
/// line) pairs: appending every line to a list per term in one map for the whole buffer
/// missed the cache at each of a line's terms (a tenth of the node's CPU under log ingest).
struct Postings {
    project: Arc<str>,
    /// Sorted, unique.
    terms: Vec<u32>,
    /// Per term, where its lines end in `lines`.
    ends: Vec<u32>,
    lines: Vec<u32>,
}

impl Postings {
    /// `pairs` as `term << 32 | line`, in rising line order.
    fn new(project: Arc<str>, mut pairs: Vec<u64>) -> Self {
        sort_by_high_half(&mut pairs);
        let term = |pair: u64| (pair >> 32) as u32;
        let distinct = 1 + pairs.windows(2).filter(|w| term(w[0]) != term(w[1])).count();
        let mut postings = Postings {
            project,
            terms: Vec::with_capacity(distinct),
            ends: Vec::with_capacity(distinct),
            lines: Vec::with_capacity(pairs.len()),
        };
        for pair in pairs {
            if postings.terms.last() != Some(&term(pair)) {
                if !postings.terms.is_empty() {
                    postings.ends.push(postings.lines.len() as u32);
                }
                postings.terms.push(term(pair));
            }
            postings.lines.push(pair as u32);
        }
        postings.ends.push(postings.lines.len() as u32);
        postings
    }

    /// The lines holding `term`, rising.
    fn lines(&self, term: u32) -> &[u32] {
        match self.terms.binary_search(&term) {
            Ok(i) => {
                let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
                &self.lines[start..self.ends[i] as usize]
            }
            Err(_) => &[],
        }
    }

    fn heap_bytes(&self) -> usize {
        (self.terms.capacity() + self.ends.capacity() + self.lines.capacity()) * 4
    }
}

/// Rows of one project and table in a buffer, and their time span.
#[derive(Clone, Copy, Debug)]
struct Extent {
    rows: u64,
    min_ns: i64,
    max_ns: i64,
}

/// One batch's rows of one table: consecutive positions, and the span of their times.
struct Run {
    project: Arc<str>,
    table: Table,
    positions: std::ops::Range<u32>,
    min_ns: i64,
    max_ns: i64,
}

impl Run {
    /// How many of its rows `scan` selects by time (and event name: not for a scan of named
    /// events, which goes through the index).
    fn rows_in(&self, scan: &super::Scan, rows: &[BufferedRow]) -> usize {
        if scan.from_ns <= self.min_ns && self.max_ns < scan.to_ns {
            return self.positions.len();
        }
        self.positions.clone().filter(|&i| scan.may_select(&rows[i as usize].row)).count()
    }
}

impl Extent {
    fn add(&mut self, rows: u64, min_ns: i64, max_ns: i64) {
        self.rows += rows;
        self.min_ns = self.min_ns.min(min_ns);
        self.max_ns = self.max_ns.max(max_ns);
    }
}

fn trace_key(project: &str, trace_id: &str) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = rustc_hash::FxBuildHasher.build_hasher();
    (project, trace_id).hash(&mut h);
    h.finish()
}

/// Start of the time bucket of `table` holding `ns`, in unix seconds.
pub fn bucket_start(table: Table, ns: i64) -> i64 {
    let width = table.bucket_seconds();
    ns.div_euclid(1_000_000_000).div_euclid(width) * width
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{Filter, Scan};
    use proptest::prelude::*;
    use sextant_model::row::{Attribute, Event, HostMetric, LogLevel, LogRecord, Value};
    use sextant_model::text::LogQuery;
    use sextant_proto::convert::persist_row::encode_ingest;

    proptest::proptest! {
        /// The postings' sort orders by term and keeps each term's lines in the order given.
        #[test]
        fn sorting_by_the_high_half_is_a_stable_sort_by_it(
            items in proptest::collection::vec((0u32..40, proptest::num::u32::ANY, proptest::num::u32::ANY), 0..6000),
        ) {
            // Few distinct high halves, spread over every digit of the sort.
            let mut items: Vec<u64> = items.iter().map(|&(k, spread, low)| u64::from(k.wrapping_mul(0x9E37_79B9) ^ (spread & 0x8020_0400)) << 32 | u64::from(low)).collect();
            let mut want = items.clone();
            want.sort_by_key(|x| x >> 32);
            sort_by_high_half(&mut items);
            proptest::prop_assert_eq!(items, want);
        }
    }

    /// Words with case, punctuation, underscores, digits and non-ASCII letters, so index and
    /// scan must tokenize alike.
    const WORDS: [&str; 12] = [
        "Payment",
        "payment",
        "PAYMENT,",
        "declined!",
        "order_id=42",
        "zoë",
        "ZOË",
        "reset",
        "by",
        "peer",
        "42",
        "a-b",
    ];
    const EVENTS: [&str; 3] = ["buy", "Buy", "view"];
    const HOSTS: [&str; 3] = ["web-1", "web-2", "Web-1"];
    const PROJECTS: [&str; 2] = ["p", "q"];

    /// Pushes `batch`; returns its encoded size.
    fn push(buffer: &mut Buffer, id: u128, batch: RowBatch) -> usize {
        let payload = encode_ingest(batch);
        let len = payload.len();
        buffer.push(id, decode_batch(payload.into()).unwrap(), len, Duration::ZERO);
        len
    }

    fn scan(table: Table, project: &str, filter: Filter) -> Scan {
        Scan {
            table,
            project: project.into(),
            from_ns: 0,
            to_ns: i64::MAX,
            filter,
            columns: vec![],
            dictionaries: vec![],
            stored_ids: false,
        }
    }

    fn rows_of(table: Table, batches: Vec<arrow_array::RecordBatch>) -> Vec<Row> {
        batches.iter().flat_map(|rb| super::super::table::from_record_batch(table, rb)).map(|(_, r, _)| r).collect()
    }

    fn log_line(words: &[usize], attribute: Option<usize>, t: i64) -> LogRecord {
        LogRecord {
            unix_nanos: t,
            level: LogLevel::from_code(9),
            service: "api".into(),
            message: words.iter().map(|&w| WORDS[w % WORDS.len()]).collect::<Vec<_>>().join(" "),
            attributes: attribute
                .map(|a| Attribute { key: "user".into(), value: Some(Value::String(WORDS[a % WORDS.len()].into())) })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    /// A query of up to three terms from WORDS: plain, quoted (a phrase of two), excluded, or
    /// an attribute filter.
    fn query(terms: &[(usize, usize, u8)]) -> String {
        let w = |i: usize| WORDS[i % WORDS.len()];
        let parts: Vec<String> = terms
            .iter()
            .map(|&(a, b, kind)| match kind % 4 {
                0 => w(a).to_owned(),
                1 => format!("\"{} {}\"", w(a), w(b)),
                2 => format!("-{}", w(a)),
                _ => format!("user:{}", w(a).replace('"', "")),
            })
            .collect();
        parts.join(" ")
    }

    proptest! {
        /// Rows are ordered as comparing each (project, sort key) in full orders them, equal
        /// ones in buffer order: texts shorter and longer than the compared head, sharing it,
        /// or differing only by a trailing zero byte; and rows without text (log lines), by
        /// time on both sides of zero.
        #[test]
        fn rows_sort_for_a_segment_as_their_keys_compare(
            rows in prop::collection::vec((0usize..3, 0usize..3, 0usize..7, -3i64..3), 0..80),
            only_logs in prop::bool::ANY,
        ) {
            use super::super::table::{LogRow, SpanRow};
            const PROJECTS: [&str; 3] = ["p", "q", "pq"];
            let long = "4bf92f3577b34da6a3ce929d0e0e4736";
            let texts = [
                "".to_owned(), "a".into(), "a\0".into(), long.into(), format!("{long}x"),
                format!("{long}y"), format!("{}", &long[..31]),
            ];
            let owned: Vec<BufferedRow> = rows
                .iter()
                .enumerate()
                .map(|(i, &(project, kind, text, t))| {
                    let trace_id = texts[text].clone();
                    let row = match if only_logs { 1 } else { kind } {
                        0 => Row::Span(SpanRow { trace_id, start_unix_nanos: t, ..Default::default() }),
                        1 => Row::Log(LogRow { unix_nanos: t, ..Default::default() }),
                        _ => Row::Event(Event { distinct_id: trace_id, unix_nanos: t, ..Default::default() }),
                    };
                    BufferedRow { project: PROJECTS[project].into(), row, batch_id: i as u128, terms: Box::default() }
                })
                .collect();
            let (got, want) = sorted_both_ways(&owned);
            prop_assert_eq!(got, want);
        }
    }

    /// Rows of 70,000 projects, whose ranks need more than 16 of the 32 bits the first sort
    /// word gives them, sort as their keys compare.
    #[test]
    fn rows_of_tens_of_thousands_of_projects_sort_too() {
        let owned: Vec<BufferedRow> = (0..70_000u32)
            .map(|i| {
                let distinct_id = format!("user-{}", i % 7);
                let row = Row::Event(Event { distinct_id, unix_nanos: i64::from(i % 3), ..Default::default() });
                BufferedRow {
                    project: format!("p{}", i.wrapping_mul(2_654_435_761)).into(),
                    row,
                    batch_id: i.into(),
                    terms: Box::default(),
                }
            })
            .collect();
        let (got, want) = sorted_both_ways(&owned);
        assert_eq!(got, want);
    }

    /// The ids of `rows` in the order [`sort_for_segment`] gives, and in the order comparing
    /// each (project, sort key) in full gives.
    fn sorted_both_ways(rows: &[BufferedRow]) -> (Vec<u128>, Vec<u128>) {
        let mut want: Vec<&BufferedRow> = rows.iter().collect();
        want.sort_by(|a, b| (&a.project, a.row.sort_key()).cmp(&(&b.project, b.row.sort_key())));
        let mut got: Vec<&BufferedRow> = rows.iter().collect();
        sort_for_segment(&mut got);
        let ids = |v: &[&BufferedRow]| v.iter().map(|r| r.batch_id).collect::<Vec<_>>();
        (ids(&got), ids(&want))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// An estimate counts the rows a scan would consider, whether the range holds all of a
        /// table's buffered rows (counted from the buffer's extents, or for named events and
        /// one host's samples their index) or only some (walked).
        #[test]
        fn buffer_estimates_count_the_rows_in_range_either_way(
            events in prop::collection::vec((0usize..2, 0usize..3, -50i64..50), 0..40),
            logs in prop::collection::vec((0usize..2, prop::collection::vec(-50i64..50, 1..5)), 0..10),
            samples in prop::collection::vec((0usize..2, 0usize..3, -50i64..50), 0..30),
            ranges in prop::collection::vec((-60i64..60, 0i64..130), 1..6),
            names in prop::collection::vec(0usize..3, 0..2),
            host in prop::option::of(0usize..3),
        ) {
            let mut buffer = Buffer::default();
            for (i, (project, name, t)) in events.iter().enumerate() {
                let events = vec![Event { uuid: format!("e{i}"), event: EVENTS[*name].into(), unix_nanos: *t, ..Default::default() }];
                push(&mut buffer, i as u128, RowBatch { project_id: PROJECTS[*project].into(), events, ..Default::default() });
            }
            // Batches of several lines, whose times may fall on both sides of a range's end.
            for (i, (project, times)) in logs.iter().enumerate() {
                let logs = times.iter().map(|&t| log_line(&[0], None, t)).collect();
                push(&mut buffer, 100 + i as u128, RowBatch { project_id: PROJECTS[*project].into(), logs, ..Default::default() });
            }
            for (i, (project, h, t)) in samples.iter().enumerate() {
                let host_metrics = vec![HostMetric { hostname: HOSTS[*h].into(), unix_nanos: *t, ..Default::default() }];
                push(&mut buffer, 200 + i as u128, RowBatch { project_id: PROJECTS[*project].into(), host_metrics, ..Default::default() });
            }
            let names: Vec<String> = names.iter().map(|&n| EVENTS[n].to_owned()).collect();
            let hostname = host.map(|h| HOSTS[h].to_owned());
            for (from, len) in ranges {
                for project in PROJECTS {
                    let mut events_scan = scan(Table::Events, project, Filter { events: names.clone(), ..Default::default() });
                    let mut logs_scan = scan(Table::Logs, project, Filter::default());
                    let mut hosts_scan = scan(Table::HostMetrics, project, Filter { hostname: hostname.clone(), ..Default::default() });
                    (events_scan.from_ns, events_scan.to_ns) = (from, from + len);
                    (logs_scan.from_ns, logs_scan.to_ns) = (from, from + len);
                    (hosts_scan.from_ns, hosts_scan.to_ns) = (from, from + len);
                    let in_range = |t: i64| (from..from + len).contains(&t);
                    let want_events = events.iter().filter(|(p, n, t)| {
                        PROJECTS[*p] == project && in_range(*t) && (names.is_empty() || names.contains(&EVENTS[*n].to_owned()))
                    }).count() as u64;
                    let want_logs = logs
                        .iter()
                        .filter(|(p, _)| PROJECTS[*p] == project)
                        .map(|(_, times)| times.iter().filter(|t| in_range(**t)).count() as u64)
                        .sum::<u64>();
                    prop_assert_eq!(buffer.estimate(&events_scan).0, want_events);
                    prop_assert_eq!(buffer.estimate(&logs_scan).0, want_logs);
                    let want_samples = samples.iter().filter(|(p, h, t)| {
                        PROJECTS[*p] == project && in_range(*t) && host.is_none_or(|host| host == *h)
                    }).count() as u64;
                    prop_assert_eq!(buffer.estimate(&hosts_scan).0, want_samples);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The index only narrows which rows the scan reads: the answers are those of reading
        /// every buffered row, for log searches, event-name filters, one host's samples and
        /// unfiltered scans of a table, in any project.
        #[test]
        fn indexed_buffer_scans_equal_full_scans(
            lines in prop::collection::vec((0usize..2, prop::collection::vec(0usize..12, 0..6), prop::option::of(0usize..12)), 0..60),
            events in prop::collection::vec((0usize..2, 0usize..3), 0..30),
            queries in prop::collection::vec(prop::collection::vec((0usize..12, 0usize..12, 0u8..4), 1..4), 1..8),
            names in prop::collection::vec(0usize..4, 0..3),
            samples in prop::collection::vec((0usize..2, 0usize..3), 0..30),
            lines_per_batch in 1usize..5,
        ) {
            let mut buffer = Buffer::default();
            // A batch's lines take the project of its first.
            for (i, batch) in lines.chunks(lines_per_batch).enumerate() {
                let logs = batch.iter().enumerate().map(|(j, (_, words, attribute))| log_line(words, *attribute, (i * 10 + j) as i64)).collect();
                push(&mut buffer, i as u128, RowBatch { project_id: PROJECTS[batch[0].0].into(), logs, ..Default::default() });
            }
            for (i, (project, name)) in events.iter().enumerate() {
                let events = vec![Event { uuid: format!("e{i}"), event: EVENTS[*name].into(), unix_nanos: i as i64, ..Default::default() }];
                push(&mut buffer, 1000 + i as u128, RowBatch { project_id: PROJECTS[*project].into(), events, ..Default::default() });
            }
            for (i, (project, h)) in samples.iter().enumerate() {
                let host_metrics = vec![HostMetric { hostname: HOSTS[*h].into(), unix_nanos: i as i64, ..Default::default() }];
                push(&mut buffer, 2000 + i as u128, RowBatch { project_id: PROJECTS[*project].into(), host_metrics, ..Default::default() });
            }
            let none = |_: u128| false;
            for project in PROJECTS {
                for terms in &queries {
                    let q = query(terms);
                    let filter = Filter { log_query: Some(LogQuery::parse(&q).unwrap()), ..Default::default() };
                    let s = scan(Table::Logs, project, filter);
                    prop_assert_eq!(rows_of(Table::Logs, buffer.scan_rows(&s, &none, None)), rows_of(Table::Logs, buffer.scan_rows_unindexed(&s, &none)), "query {}", q);
                }
                // Index 3: a name no event has.
                let wanted: Vec<String> = names.iter().map(|&n| EVENTS.get(n).copied().unwrap_or("none").to_owned()).collect();
                let s = scan(Table::Events, project, Filter { events: wanted, ..Default::default() });
                prop_assert_eq!(rows_of(Table::Events, buffer.scan_rows(&s, &none, None)), rows_of(Table::Events, buffer.scan_rows_unindexed(&s, &none)));
                // Index 3: a host with no samples; `None`: every host.
                for hostname in [None, Some(0), Some(1), Some(3)] {
                    let hostname = hostname.map(|h| HOSTS.get(h).copied().unwrap_or("none").to_owned());
                    let s = scan(Table::HostMetrics, project, Filter { hostname, ..Default::default() });
                    let (got, all) = (buffer.scan_rows(&s, &none, None), buffer.scan_rows_unindexed(&s, &none));
                    prop_assert_eq!(rows_of(Table::HostMetrics, got), rows_of(Table::HostMetrics, all));
                }
                // Each host's newest sample only, when the reader keeps no other.
                let s = scan(Table::HostMetrics, project, Filter { newest_per_host: true, ..Default::default() });
                let every = rows_of(Table::HostMetrics, buffer.scan_rows_unindexed(&scan(Table::HostMetrics, project, Filter::default()), &none));
                let newest: Vec<&Row> = every.iter().filter(|r| {
                    let Row::HostMetric(m) = r else { return false };
                    every.iter().all(|o| !matches!(o, Row::HostMetric(o) if o.hostname == m.hostname && o.unix_nanos > m.unix_nanos))
                }).collect();
                let got = rows_of(Table::HostMetrics, buffer.scan_rows(&s, &none, None));
                prop_assert_eq!(got.iter().collect::<Vec<_>>(), newest);
                for table in [Table::Logs, Table::Events] {
                    for (from_ns, to_ns) in [(0, i64::MAX), (15, 42), (-5, 3), (1000, 2000)] {
                        let s = Scan { from_ns, to_ns, ..scan(table, project, Filter::default()) };
                        prop_assert_eq!(rows_of(table, buffer.scan_rows(&s, &none, None)), rows_of(table, buffer.scan_rows_unindexed(&s, &none)));
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A scan of users, times and names reads them from the events' columns: the same
        /// rows as reading the rows themselves, in any project, range and choice of names,
        /// with events of other tables' rows and of hidden batches around them.
        #[test]
        fn event_columns_select_what_the_rows_do(
            batches in prop::collection::vec((0usize..2, prop::collection::vec((0usize..4, 0usize..5, -20i64..20), 1..6)), 1..20),
            names in prop::collection::vec(0usize..4, 0..3),
            ranges in prop::collection::vec((-25i64..25, 0i64..50), 1..4),
            hide in prop::option::of(0usize..20),
        ) {
            use super::super::table::{Cols, Strings};
            const NAMES: [&str; 4] = ["buy", "Buy", "view", "signup"];
            let mut buffer = Buffer::default();
            let users = UserNumbers::default();
            for (i, (project, events)) in batches.iter().enumerate() {
                let events = events.iter().enumerate().map(|(j, &(name, user, t))| Event {
                    uuid: format!("e{i}-{j}"), event: NAMES[name].into(), distinct_id: format!("u{user}"), unix_nanos: t, ..Default::default()
                }).collect();
                let logs = vec![log_line(&[0], None, i as i64)];
                push(&mut buffer, i as u128, RowBatch { project_id: PROJECTS[*project].into(), events, logs, ..Default::default() });
            }
            let wanted: Vec<String> = names.iter().map(|&n| NAMES[n].to_owned()).collect();
            let triples = |batches: Vec<arrow_array::RecordBatch>| -> Vec<(u32, i64, String)> {
                batches.iter().flat_map(|rb| {
                    let c = Cols(rb);
                    let (users, times, events) = (c.u32(USER), c.i64("time_ns"), c.strings("event"));
                    (0..rb.num_rows()).map(move |i| (users.value(i), times.value(i), events.value(i).to_owned())).collect::<Vec<_>>()
                }).collect()
            };
            for project in PROJECTS {
                for &(from_ns, len) in &ranges {
                    for events in [Vec::new(), wanted.clone()] {
                        let s = Scan {
                            from_ns,
                            to_ns: from_ns + len,
                            columns: vec![USER.into(), "time_ns".into(), "event".into()],
                            dictionaries: vec!["event"],
                            ..scan(Table::Events, project, Filter { events, ..Default::default() })
                        };
                        let none = |_: u128| false;
                        let from_columns = buffer.scan_rows(&s, &none, Some(&users));
                        let dictionary = |rb: &arrow_array::RecordBatch| matches!(Cols(rb).strings("event"), Strings::Dictionary { .. });
                        prop_assert!(from_columns.iter().all(dictionary));
                        // Names of other projects' events stay out of the dictionary, too.
                        let own: HashSet<&str> = batches.iter().filter(|(p, _)| PROJECTS[*p] == project)
                            .flat_map(|(_, events)| events.iter().map(|&(n, _, _)| NAMES[n])).collect();
                        for rb in &from_columns {
                            let Strings::Dictionary { values, .. } = Cols(rb).strings("event") else { unreachable!() };
                            prop_assert!(values.iter().all(|v| v.is_some_and(|v| own.contains(v))));
                        }
                        let hidden = |b: u128| Some(b as usize) == hide;
                        for hidden in [&none as &dyn Fn(u128) -> bool, &hidden] {
                            let rows = buffer.scan_from(Box::new(0..buffer.rows.len() as u32), &s, hidden, Some(&users));
                            prop_assert_eq!(triples(buffer.scan_rows(&s, hidden, Some(&users))), triples(rows));
                        }
                    }
                }
            }
        }
    }

    /// A buffer whose rows fall in so many buckets that a rollup row would stand for fewer than
    /// `min_rows_per_rollup` rows stops adding them up (bounding their memory) and hands rollup
    /// scans its rows instead; the counts stay exact, and another table's rollups still pay.
    #[test]
    fn rollups_that_do_not_pay_are_dropped_and_rows_read_instead() {
        const HOUR: i64 = 3_600_000_000_000;
        let count_events = |buffer: &Buffer| -> u64 {
            let mut rollups = scan(Table::EventRollups, "p", Filter::default());
            rollups.to_ns = i64::MAX - HOUR;
            let batches = buffer.scan_rows(&rollups, &|_| false, None);
            batches
                .iter()
                .map(|rb| match rb.column_by_name("count") {
                    Some(_) => super::super::table::Cols(rb).u64("count").values().iter().sum(),
                    None => rb.num_rows() as u64,
                })
                .sum()
        };
        let events = |n: i64, hours: i64| -> Vec<Event> {
            (0..n)
                .map(|i| Event { event: "view".into(), unix_nanos: (i % hours) * HOUR, ..Default::default() })
                .collect()
        };
        let mut few = Buffer::default();
        push(&mut few, 1, RowBatch { project_id: "p".into(), events: events(5_000, 24), ..Default::default() });
        assert_eq!(count_events(&few), 5_000);
        assert_eq!(few.running_rollups(Table::EventRollups).map(|r| r.len()), Some(24));

        let rows = (crate::segment::rollup::ROLLUP_SLACK * 8 / 7 + 1_000) as i64;
        let mut many = Buffer::default();
        let host_metrics: Vec<HostMetric> = (0..600)
            .map(|i| HostMetric { unix_nanos: i * 1_000_000_000, hostname: "h".into(), ..Default::default() })
            .collect();
        push(&mut many, 1, RowBatch { project_id: "p".into(), host_metrics, ..Default::default() });
        push(&mut many, 2, RowBatch { project_id: "p".into(), events: events(rows, rows), ..Default::default() });
        assert_eq!(count_events(&many), rows as u64);
        assert!(many.running_rollups(Table::EventRollups).is_none());
        assert_eq!(many.running_rollups(Table::HostRollups).map(|r| r.len()), Some(10), "ten minutes of one host");
    }

    #[test]
    fn a_rare_term_reads_only_the_lines_holding_it() {
        let mut buffer = Buffer::default();
        let mut logs: Vec<LogRecord> = (0..1000).map(|i| log_line(&[7, 8, 9], None, i)).collect();
        logs[500].message = "Found the NEEDLE, finally".into();
        push(&mut buffer, 1, RowBatch { project_id: "p".into(), logs, ..Default::default() });
        let s = scan(
            Table::Logs,
            "p",
            Filter { log_query: Some(LogQuery::parse("needle").unwrap()), ..Default::default() },
        );
        assert_eq!(buffer.candidates(&s).count(), 1);
        let found = rows_of(Table::Logs, buffer.scan_rows(&s, &|_| false, None));
        assert!(matches!(&found[..], [Row::Log(l)] if l.unix_nanos == 500));
        let absent = scan(
            Table::Logs,
            "p",
            Filter { log_query: Some(LogQuery::parse("needle missing").unwrap()), ..Default::default() },
        );
        assert_eq!(buffer.candidates(&absent).count(), 0);
        let other = scan(
            Table::Logs,
            "q",
            Filter { log_query: Some(LogQuery::parse("needle").unwrap()), ..Default::default() },
        );
        assert_eq!(buffer.candidates(&other).count(), 0, "postings are per project");
    }

    #[test]
    fn the_index_counts_in_the_buffer_size() {
        let line = |words: &[usize]| RowBatch {
            project_id: "p".into(),
            logs: vec![log_line(words, None, 1)],
            ..Default::default()
        };
        let mut buffer = Buffer::default();
        // Five distinct terms: the line's five terms kept for the flush, and the batch's
        // postings (per term: the term, where its lines end, one line); the batch's run of
        // log lines.
        let run = std::mem::size_of::<Run>();
        let first = push(&mut buffer, 1, line(&[7, 8, 9, 10, 5]));
        assert_eq!(buffer.bytes, first * 3 + 5 * 4 + 5 * 12 + run);
        // The same terms again, one of them twice: counted once.
        let second = push(&mut buffer, 2, line(&[7, 8, 9, 10, 5, 5]));
        assert_eq!(buffer.bytes, (first + second) * 3 + 2 * (5 * 4 + 5 * 12 + run));
    }
}

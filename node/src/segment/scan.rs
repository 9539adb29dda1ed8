//! Scans: the rows of one table for one project and time range, with the predicates of the
//! query pushed down — to whole segments (time range), to row groups (min/max statistics,
//! the trace-id bloom filter, the log token index) and finally to rows (one mask per batch).
//! The same [`Scan::mask`] decides for buffered rows and for segment rows.

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow_buffer::BooleanBuffer;
use arrow_schema::ArrowError;
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::statistics::Statistics;
use sextant_model::text::{tokens, LogQuery};

use super::attribute::{read_stored, Attribute};
use super::layout::stored_value;
use super::table::{Cols, Row, RowRef, Strings, Table};
use super::token_index::{term_hash, TokenIndex};
use super::user_number::{with_user_column, USER, USER_ID};

/// Row predicates of a scan. Empty lists and `None`s do not filter.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Spans and logs: `service` is one of these; trace summaries: any of the trace's services.
    pub services: Vec<String>,
    pub operation: Option<String>,
    /// Log levels (the protobuf enum values).
    pub levels: Vec<i32>,
    pub trace_id: Option<String>,
    pub hostname: Option<String>,
    /// Events: the event name is one of these.
    pub events: Vec<String>,
    pub distinct_id: Option<String>,
    pub session_id: Option<String>,
    /// Spans: status is error; trace summaries: at least one error span.
    pub errors_only: bool,
    /// Spans: duration; trace summaries: end − start.
    pub min_duration_ns: Option<i64>,
    pub log_query: Option<LogQuery>,
    /// Host samples: a reader that keeps only each host's newest sample; the buffer hands it
    /// no other (segments still return every sample the rest of the filter selects).
    pub newest_per_host: bool,
}

/// What to read.
#[derive(Clone, Debug)]
pub struct Scan {
    pub table: Table,
    pub project: String,
    /// Inclusive start and exclusive end of the time range, unix nanoseconds.
    pub from_ns: i64,
    pub to_ns: i64,
    pub filter: Filter,
    /// Columns to return (all when empty). Filter columns are read as needed regardless.
    pub columns: Vec<String>,
    /// Returned string columns to read from segments as Arrow dictionaries (`Int32` keys into
    /// the column chunk's dictionary) instead of one string per row, for readers that group
    /// by them. Not where the row mask compares them ([`Scan::dictionary_columns`]); buffered
    /// rows are plain strings either way ([`super::table::Cols::strings`] reads both).
    pub dictionaries: Vec<&'static str>,
    /// Spans from segments with ids as stored ([`super::hex_ids`]) and `parent_ref` kept
    /// ([`super::layout::assemble`]), for readers that join spans to their parents; buffered
    /// rows have text ids and no references.
    pub stored_ids: bool,
}

fn str_stats(s: &Statistics) -> Option<(&[u8], &[u8])> {
    Some((s.min_bytes_opt()?, s.max_bytes_opt()?))
}

fn i64_stats(s: &Statistics) -> Option<(i64, i64)> {
    match s {
        Statistics::Int64(v) => Some((*v.min_opt()?, *v.max_opt()?)),
        _ => None,
    }
}

/// The columns analytics scans read as dictionaries from segments: every one of them groups
/// rows by user and most by event name, and a dictionary hashes or compares each distinct
/// value once per row group and copies no strings.
pub const EVENT_DICTIONARIES: [&str; 2] = ["distinct_id", "event"];

/// Filter columns that [`Scan::mask`] reads as plain strings or as dictionaries alike (the
/// "one of these values" conditions), so a scan may ask for them as dictionaries.
const MASKED_EITHER_WAY: [&str; 2] = ["service", "event"];

impl Scan {
    /// The index terms a log line must hold to match, hashed.
    pub fn required_terms(&self) -> Vec<u32> {
        self.filter
            .log_query
            .as_ref()
            .map_or_else(Vec::new, |q| q.required_terms().iter().map(|t| term_hash(t)).collect())
    }

    /// For a scan of a rollup table: the scan of the source rows it rolls up. A rollup of
    /// bucket `b` holds the rows of `[b, b + width)`, so the source range is rounded up to
    /// bucket starts at both ends.
    pub fn rollup_source(&self) -> Option<Scan> {
        let width = super::rollup::width(self.table)?;
        let (columns, dictionaries) = super::rollup::source_columns(self.table);
        Some(Scan {
            table: self.table.source(),
            from_ns: super::rollup::bucket_at_or_after(self.from_ns, width).unwrap_or(i64::MAX),
            to_ns: super::rollup::bucket_at_or_after(self.to_ns, width).unwrap_or(i64::MAX),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            dictionaries,
            ..self.clone()
        })
    }

    /// For a scan of trace summaries: the scan of every span of its project they summarize
    /// (a summary's start is its trace's earliest span, so no time bound).
    pub fn summary_source(&self) -> Option<Scan> {
        (self.table == Table::TraceSummaries).then(|| Scan {
            table: Table::Spans,
            project: self.project.clone(),
            from_ns: i64::MIN,
            to_ns: i64::MAX,
            filter: Filter::default(),
            columns: Vec::new(),
            dictionaries: Vec::new(),
            stored_ids: false,
        })
    }

    /// Whether a segment covering `[min_ns, max_ns]` of `table` can hold matching rows.
    pub fn wants_segment(&self, table: Table, min_ns: i64, max_ns: i64) -> bool {
        table == self.table && max_ns >= self.from_ns && min_ns < self.to_ns
    }

    /// The columns of `table` whose row-group statistics prune ([`wants_row_group`](Self::wants_row_group),
    /// the time column also for [`Segment::row_groups_by_time`](super::Segment::row_groups_by_time)).
    /// Segments keep statistics for these only: the others' would cost footer bytes and never
    /// be read (spans: about a byte per span for their per-page column index).
    pub fn pruning_columns(table: Table) -> &'static [&'static str] {
        match table {
            Table::Spans => &["project", "start_ns", "service", "trace_id", "operation"],
            Table::TraceSummaries => &["project", "start_ns", "trace_id"],
            Table::SpanRollups => &["project", "minute_ns", "service"],
            Table::SpanHourRollups => &["project", "hour_ns", "service"],
            Table::SpanDayRollups => &["project", "day_ns", "service"],
            Table::EventRollups => &["project", "hour_ns", "event"],
            Table::Logs => &["project", "time_ns", "service", "level"],
            Table::HostMetrics => &["project", "time_ns", "hostname"],
            Table::HostRollups => &["project", "minute_ns", "hostname"],
            Table::Events => &["project", "time_ns", "event", "distinct_id"],
            Table::ReplayEvents => &["project", "time_ns", "session_id", "distinct_id"],
        }
    }

    /// Whether a row group can hold matching rows, by its column statistics. `schema` is the
    /// segment file's: values compare with statistics in the form the file stores them.
    pub fn wants_row_group(&self, rg: &RowGroupMetaData, schema: &arrow_schema::Schema) -> bool {
        let stats = |name: &str| {
            // Only these have statistics in segments written now; a column missing there
            // would silently stop pruning.
            debug_assert!(
                Self::pruning_columns(self.table).contains(&name)
                    || (name == "trace_id" && self.table == Table::Logs)
                    || (name == "level" && self.table != Table::Logs),
                "{name} of {:?} has no statistics",
                self.table
            );
            schema.index_of(name).ok().and_then(|i| rg.column(i).statistics())
        };
        let str_within = |name: &str, values: &[&str]| {
            stats(name).and_then(str_stats).is_none_or(|(lo, hi)| {
                // A value stored as null is outside min/max: no pruning by it.
                values.iter().any(|v| stored_value(schema, name, v).is_none_or(|v| lo <= &*v && &*v <= hi))
            })
        };
        if !str_within("project", &[self.project.as_str()]) {
            return false;
        }
        if let Some((lo, hi)) = stats(self.table.time_column()).and_then(i64_stats) {
            if hi < self.from_ns || lo >= self.to_ns {
                return false;
            }
        }
        let f = &self.filter;
        let one = |name: &str, v: &Option<String>| v.as_ref().is_none_or(|v| str_within(name, &[v.as_str()]));
        let any = |name: &str, vs: &[String]| {
            vs.is_empty() || str_within(name, &vs.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let per_table = match self.table {
            Table::Spans => {
                any("service", &f.services) && one("trace_id", &f.trace_id) && one("operation", &f.operation)
            }
            Table::TraceSummaries => one("trace_id", &f.trace_id),
            Table::SpanRollups | Table::SpanHourRollups | Table::SpanDayRollups => any("service", &f.services),
            Table::EventRollups => any("event", &f.events),
            Table::Logs => any("service", &f.services) && one("trace_id", &f.trace_id),
            Table::HostMetrics | Table::HostRollups => one("hostname", &f.hostname),
            Table::Events => any("event", &f.events) && one("distinct_id", &f.distinct_id),
            Table::ReplayEvents => one("session_id", &f.session_id) && one("distinct_id", &f.distinct_id),
        };
        per_table
            && (self.filter.levels.is_empty()
                || stats("level")
                    .and_then(|s| match s {
                        Statistics::Int32(v) => Some((*v.min_opt()?, *v.max_opt()?)),
                        _ => None,
                    })
                    .is_none_or(|(lo, hi)| f.levels.iter().any(|l| (lo..=hi).contains(l))))
    }

    /// Whether every row of a row group matches, by its statistics: one project (exactly
    /// ours), a time range inside the scan's and no row predicate beyond those two. Such a row
    /// group needs no row mask, so neither the columns the mask reads (a whole-range APM or
    /// service map reads every row group this way). The caller checks tombstones.
    pub fn selects_whole_row_group(&self, rg: &RowGroupMetaData, schema: &arrow_schema::Schema) -> bool {
        let stats = |name: &str| schema.index_of(name).ok().and_then(|i| rg.column(i).statistics());
        // Only project, time and batch: no other predicate needs a column.
        self.filter_columns().len() == 3
            && stats("project").is_some_and(|s| {
                s.min_is_exact()
                    && s.max_is_exact()
                    && str_stats(s).is_some_and(|(lo, hi)| lo == hi && lo == self.project.as_bytes())
            })
            && stats(self.table.time_column())
                .and_then(i64_stats)
                .is_some_and(|(lo, hi)| self.from_ns <= lo && hi < self.to_ns)
    }

    /// The [`Scan::dictionaries`] that the row mask can read: those it does not need, and
    /// those it reads either way.
    pub fn dictionary_columns(&self) -> Vec<&'static str> {
        let filter = self.filter_columns();
        self.dictionaries.iter().copied().filter(|c| !filter.contains(c) || MASKED_EITHER_WAY.contains(c)).collect()
    }

    /// Row groups of a log segment that its token index allows.
    pub fn wants_row_group_by_terms(&self, index: Option<&TokenIndex>, rg: usize, terms: &[u32]) -> bool {
        terms.is_empty() || index.is_none_or(|idx| idx.may_contain_all(rg, terms))
    }

    /// Columns the row mask needs (beyond those returned).
    pub fn filter_columns(&self) -> Vec<&'static str> {
        let f = &self.filter;
        let mut c = vec!["project", self.table.time_column(), "batch"];
        let mut need = |cond: bool, name: &'static str| {
            if cond {
                c.push(name);
            }
        };
        match self.table {
            Table::Spans => {
                need(!f.services.is_empty(), "service");
                need(f.operation.is_some(), "operation");
                need(f.trace_id.is_some(), "trace_id");
                need(f.errors_only, "status");
                need(f.min_duration_ns.is_some(), "duration_ns");
            }
            Table::TraceSummaries => {
                need(!f.services.is_empty(), "services");
                need(f.trace_id.is_some(), "trace_id");
                need(f.errors_only, "error_count");
                need(f.min_duration_ns.is_some(), "end_ns");
            }
            Table::SpanRollups | Table::SpanHourRollups | Table::SpanDayRollups => {
                need(!f.services.is_empty(), "service")
            }
            Table::EventRollups => need(!f.events.is_empty(), "event"),
            Table::Logs => {
                need(!f.services.is_empty(), "service");
                need(!f.levels.is_empty(), "level");
                need(f.trace_id.is_some(), "trace_id");
                need(f.log_query.is_some(), "message");
                need(f.log_query.as_ref().is_some_and(|q| !q.attributes.is_empty()), "attributes");
            }
            Table::HostMetrics | Table::HostRollups => need(f.hostname.is_some(), "hostname"),
            Table::Events => {
                need(!f.events.is_empty(), "event");
                need(f.distinct_id.is_some(), "distinct_id");
            }
            Table::ReplayEvents => {
                need(f.session_id.is_some(), "session_id");
                need(f.distinct_id.is_some(), "distinct_id");
            }
        }
        c
    }

    /// The names (hosts, events or services) a scan of rollups keeps, none meaning all: a
    /// first selection of running rollups, before they are made rows ([`mask`](Self::mask)
    /// still decides).
    pub fn rollup_names(&self) -> Vec<&str> {
        let f = &self.filter;
        match self.table {
            Table::HostRollups => f.hostname.iter().map(String::as_str).collect(),
            Table::EventRollups => f.events.iter().map(String::as_str).collect(),
            Table::SpanRollups | Table::SpanHourRollups | Table::SpanDayRollups => {
                f.services.iter().map(String::as_str).collect()
            }
            _ => Vec::new(),
        }
    }

    /// A cheap first selection of buffered rows, before they are turned into columns (all of
    /// them, every query): the time range and, for events, the event names. [`mask`](Self::mask)
    /// still decides. Not for trace summaries, which are derived from all of a trace's spans.
    pub fn may_select(&self, row: &Row) -> bool {
        if self.table == Table::TraceSummaries {
            return true;
        }
        let t = row.time_ns();
        t >= self.from_ns
            && t < self.to_ns
            && match row {
                Row::Event(e) => self.filter.events.is_empty() || self.filter.events.contains(&e.event),
                _ => true,
            }
    }

    /// Which rows of `rb` match; `hidden(batch ordinal)` says which rows an abort removed.
    /// A batch without a `project` column holds only the scan's project, one without a
    /// `batch` column no hidden rows (see [`read_columns`](Self::read_columns)).
    pub fn mask<'a>(&'a self, rb: &'a RecordBatch, hidden: &dyn Fn(u32) -> bool) -> BooleanArray {
        let c = Cols(rb);
        let f = &self.filter;
        let project = rb.column_by_name("project").map(|_| c.str("project"));
        let time = c.i64(self.table.time_column());
        let batch = rb.column_by_name("batch").map(|_| c.u32("batch"));
        // Each condition's column is looked up once per batch, not per row: finding a column by
        // name costs more than the comparison.
        let is = |name: &str, v: &'a Option<String>| v.as_deref().map(|v| (c.str(name), v));
        // Whether the column holds one of `vs` (plain or dictionary columns, see
        // MASKED_EITHER_WAY).
        let among = |name: &str, vs: &'a [String]| {
            (!vs.is_empty()).then(|| {
                let is_one = |value: &str| vs.iter().any(|v| v == value);
                match c.strings(name) {
                    Strings::Dictionary { keys, values } => {
                        Among::Entries { keys, matches: (0..values.len()).map(|k| is_one(values.value(k))).collect() }
                    }
                    plain => Among::Rows(plain.map(is_one)),
                }
            })
        };
        let equal = |cond: &Option<(&StringArray, &str)>, i: usize| cond.is_none_or(|(col, v)| col.value(i) == v);
        let one_of = |cond: &Option<Among>, i: usize| cond.as_ref().is_none_or(|m| m.get(i));
        // `common`, narrowed to the rows whose column holds one of `vs`.
        let among_common = |common: &BooleanBuffer, name: &str, vs: &'a [String]| {
            among(name, vs).map_or(common.clone(), |m| common & &m.pack())
        };
        // Condition by condition, 64 rows at a time: the checks of every table first, then the
        // table's own for the rows those keep.
        let (times, from, to) = (time.values(), self.from_ns, self.to_ns);
        let t = |i: usize| times[i];
        let mut common = pack(times, |t| (t >= from) & (t < to));
        if let Some(p) = project {
            common = rows(&common, |i| p.value(i) == self.project);
        }
        if let Some(b) = batch {
            common = rows(&common, |i| !hidden(b.value(i)));
        }
        let own = match self.table {
            Table::Spans => {
                let (services, operation, trace_id) =
                    (among("service", &f.services), is("operation", &f.operation), is("trace_id", &f.trace_id));
                let status = f.errors_only.then(|| c.i32("status"));
                let duration = f.min_duration_ns.map(|d| (c.i64("duration_ns"), d));
                rows(&common, |i| {
                    one_of(&services, i)
                        && equal(&operation, i)
                        && equal(&trace_id, i)
                        && status.is_none_or(|s| s.value(i) == sextant_model::row::SpanStatus::Error.code())
                        && duration.is_none_or(|(col, d)| col.value(i) >= d)
                })
            }
            Table::TraceSummaries => {
                let services = (!f.services.is_empty()).then(|| c.list("services"));
                let trace_id = is("trace_id", &f.trace_id);
                let errors = f.errors_only.then(|| c.u32("error_count"));
                let duration = f.min_duration_ns.map(|d| (c.i64("end_ns"), d));
                rows(&common, |i| {
                    let t = t(i);
                    services.is_none_or(|l| super::table::string_list(l, i).iter().any(|s| f.services.contains(s)))
                        && equal(&trace_id, i)
                        && errors.is_none_or(|e| e.value(i) > 0)
                        && duration.is_none_or(|(end, d)| end.value(i) - t >= d)
                })
            }
            Table::Logs => {
                let (services, trace_id) = (among("service", &f.services), is("trace_id", &f.trace_id));
                let levels = (!f.levels.is_empty()).then(|| c.i32("level"));
                let query = f
                    .log_query
                    .as_ref()
                    .map(|q| (q, c.str("message"), (!q.attributes.is_empty()).then(|| c.bin("attributes"))));
                let mut words = Vec::new();
                rows(&common, |i| {
                    one_of(&services, i)
                        && levels.is_none_or(|l| f.levels.contains(&l.value(i)))
                        && equal(&trace_id, i)
                        && query.is_none_or(|(q, messages, attributes)| {
                            message_matches(q, messages.value(i), &mut words)
                                && attributes.is_none_or(|a| {
                                    let attrs: Vec<Attribute<'_>> = read_stored(a.value(i)).collect();
                                    q.attributes.iter().all(|(k, v)| {
                                        attrs.iter().any(|a| a.key == k && a.text().as_deref() == Some(v))
                                    })
                                })
                        })
                })
            }
            Table::SpanRollups | Table::SpanHourRollups | Table::SpanDayRollups => {
                among_common(&common, "service", &f.services)
            }
            Table::EventRollups => among_common(&common, "event", &f.events),
            Table::HostMetrics | Table::HostRollups => {
                let hostname = is("hostname", &f.hostname);
                rows(&common, |i| equal(&hostname, i))
            }
            Table::Events => {
                // Cheap checks: on every row and without branches (which rows match is as good
                // as random, so branches were mispredicted), combined 64 rows at a time.
                let mut own = among_common(&common, "event", &f.events);
                if let Some((ids, id)) = is("distinct_id", &f.distinct_id) {
                    own = &own & &BooleanBuffer::collect_bool(own.len(), |i| ids.value(i) == id);
                }
                own
            }
            Table::ReplayEvents => {
                let (session, distinct_id) = (is("session_id", &f.session_id), is("distinct_id", &f.distinct_id));
                rows(&common, |i| equal(&session, i) && equal(&distinct_id, i))
            }
        };
        BooleanArray::new(own, None)
    }

    /// The rows the scan selects among `rows` (of its table and project, none hidden), as
    /// batches of what it returns or filters on; `users`: the rows' user numbers, if known.
    pub fn select(&self, rows: &[RowRef<'_>], users: Option<&[u32]>) -> Vec<RecordBatch> {
        let mut columns = self.read_columns(true, true);
        // Without user numbers, the ids stand in.
        if let Some(columns) = columns.as_mut().filter(|_| users.is_none() && self.returns(USER)) {
            columns.push(USER_ID.to_owned());
        }
        let mut out = Vec::new();
        const CHUNK: usize = 8192;
        for (k, chunk) in rows.chunks(CHUNK).enumerate() {
            let rb = match &columns {
                Some(columns) => super::table::to_projected_batch(self.table, chunk, columns),
                None => super::table::to_record_batch(self.table, chunk),
            };
            let mut rb = rb.expect("rows match their table's schema");
            if let Some(users) = users {
                rb = with_user_column(&rb, users[k * CHUNK..][..chunk.len()].to_vec()).expect("one number per row");
            }
            if let Some(kept) = self.apply(&rb, &|_| false).expect("filtering a batch of its own schema") {
                out.push(kept);
            }
        }
        out
    }

    /// Keeps the matching rows of `rb` and the requested columns.
    pub fn apply(&self, rb: &RecordBatch, hidden: &dyn Fn(u32) -> bool) -> Result<Option<RecordBatch>, ArrowError> {
        let mask = self.mask(rb, hidden);
        let kept = match mask.true_count() {
            0 => return Ok(None),
            // Every row matches (a scan of a whole range): no copy.
            n if n == rb.num_rows() => rb.clone(),
            _ if self.stored_ids => super::layout::filter_with_parent_refs(rb, &mask)?,
            _ => arrow_select::filter::filter_record_batch(rb, &mask)?,
        };
        self.returned_columns(&kept).map(Some)
    }

    /// The requested columns of `rb` (all when none were named).
    pub fn returned_columns(&self, rb: &RecordBatch) -> Result<RecordBatch, ArrowError> {
        if self.columns.is_empty() {
            return Ok(rb.clone());
        }
        let schema = rb.schema();
        let mut indices: Vec<usize> = Vec::with_capacity(self.columns.len());
        for c in &self.columns {
            // A source without user numbers returns the ids they are made from.
            let i = schema.index_of(c).or_else(|e| if c == USER { schema.index_of(USER_ID) } else { Err(e) });
            if let Some(i) = i.ok().filter(|i| !indices.contains(i)) {
                indices.push(i);
            }
        }
        rb.project(&indices)
    }

    /// Whether the scan returns `column`.
    pub fn returns(&self, column: &str) -> bool {
        self.columns.iter().any(|c| c == column)
    }

    /// Every column the scan reads from a segment: the returned ones and the filter's. In a
    /// segment that holds only the scan's project (`only_project`), the project column is not
    /// read unless returned, nor the batch column in one without hidden batches
    /// (`none_hidden`): every row passes those checks.
    pub fn read_columns(&self, only_project: bool, none_hidden: bool) -> Option<Vec<String>> {
        if self.columns.is_empty() {
            return None;
        }
        let mut cols = self.columns.clone();
        let known = |c: &str| (only_project && c == "project") || (none_hidden && c == "batch");
        for c in self.filter_columns() {
            if !known(c) && !cols.iter().any(|x| x == c) {
                cols.push(c.to_owned());
            }
        }
        Some(cols)
    }
}

/// The rows of `common` that `keep` keeps too, packed 64 at a time (`keep` is asked only
/// for rows of `common`).
fn rows(common: &BooleanBuffer, mut keep: impl FnMut(usize) -> bool) -> BooleanBuffer {
    BooleanBuffer::collect_bool(common.len(), |i| common.value(i) && keep(i))
}

/// Whether each row's value is one of a list: decided once per entry of a dictionary column.
enum Among<'a> {
    Entries { keys: &'a [i32], matches: Vec<bool> },
    Rows(Vec<bool>),
}

impl Among<'_> {
    fn get(&self, row: usize) -> bool {
        match self {
            Among::Entries { keys, matches } => matches[keys[row] as usize],
            Among::Rows(matches) => matches[row],
        }
    }

    /// Every row's answer. A dictionary of up to 64 entries is looked up in a table of fixed
    /// size, without bounds checks (twice as fast as shifting a word, docs/BENCHMARKS.md).
    fn pack(&self) -> BooleanBuffer {
        match self {
            Among::Entries { keys, matches } if matches.len() <= 64 => {
                let mut table = [false; 64];
                table[..matches.len()].copy_from_slice(matches);
                // Keys index the dictionary, so they are below 64 here.
                pack(keys, |k| table[(k & 63) as usize])
            }
            Among::Entries { keys, matches } => pack(keys, |k| matches[k as usize]),
            Among::Rows(matches) => pack(matches, |m| m),
        }
    }
}

/// `keep` of each value, 64 values to a word, over a slice's fixed-size chunks without bounds
/// checks (on the baseline x86-64 target a 64-bit comparison still runs as fast as Arrow's
/// `collect_bool`, docs/BENCHMARKS.md).
fn pack<T: Copy>(values: &[T], keep: impl Fn(T) -> bool) -> BooleanBuffer {
    let word = |chunk: &[T]| chunk.iter().enumerate().fold(0u64, |w, (bit, &v)| w | u64::from(keep(v)) << bit);
    let (chunks, rest) = values.as_chunks::<64>();
    let mut words: Vec<u64> = Vec::with_capacity(values.len().div_ceil(64));
    words.extend(chunks.iter().map(|c| word(c)));
    if !rest.is_empty() {
        words.push(word(rest));
    }
    BooleanBuffer::new(arrow_buffer::Buffer::from_vec(words), 0, values.len())
}

/// `q.matches_words` on the tokens of `message`. ASCII messages (and queries without
/// phrases) are checked on the message's bytes without building the tokens: a token is a
/// maximal run of ASCII alphanumerics or `_`, equal to a query word when equal ignoring ASCII
/// case (query words are lower-case already). Others go through [`tokens`].
pub(crate) fn message_matches(q: &LogQuery, message: &str, words: &mut Vec<String>) -> bool {
    if message.is_ascii() && q.phrases.is_empty() && q.words.len() <= 64 {
        let mut found = 0u64;
        let bytes = message.as_bytes();
        let mut start = 0;
        while start < bytes.len() {
            let is_word = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
            let Some(s) = bytes[start..].iter().position(is_word).map(|p| start + p) else { break };
            let e = bytes[s..].iter().position(|b| !is_word(b)).map_or(bytes.len(), |p| s + p);
            let token = &message[s..e];
            if q.excluded.iter().any(|w| token.eq_ignore_ascii_case(w)) {
                return false;
            }
            for (k, w) in q.words.iter().enumerate() {
                if token.eq_ignore_ascii_case(w) {
                    found |= 1 << k;
                }
            }
            start = e;
        }
        return found.count_ones() as usize == q.words.len();
    }
    words.clear();
    words.extend(tokens(message));
    q.matches_words(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ascii_fast_path_matches_like_the_tokens() {
        let messages = [
            "Payment declined for order 4411: card_declined (insufficient funds)",
            "payment_declined PAYMENT payments retry=3",
            "GET /api/products/12 status=200",
            "Zoë paid 3€ — payment ok",
            "",
            "   ",
            "timeout timeout TIMEOUT",
        ];
        let queries = [
            "payment",
            "PAYMENT declined",
            "payment -retry",
            "card_declined",
            "card declined",
            "\"declined for\"",
            "zoë",
            "-timeout",
            "timeout timeout",
            "status 200 -api",
            "",
        ];
        let mut scratch = Vec::new();
        for q in queries {
            let q = LogQuery::parse(q).unwrap();
            for m in messages {
                let reference = q.matches_words(&tokens(m).collect::<Vec<_>>());
                assert_eq!(message_matches(&q, m, &mut scratch), reference, "{q:?} on {m:?}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn packed_answers_equal_each_rows_answer(
            times in proptest::collection::vec(-5i64..5, 0..300),
            keys in proptest::collection::vec(0i32..100, 0..300),
            entries in 1usize..100,
            wanted in proptest::collection::vec(proptest::bool::ANY, 100),
        ) {
            let packed = pack(&times, |t| (t >= -2) & (t < 3));
            let each: Vec<bool> = times.iter().map(|&t| (-2..3).contains(&t)).collect();
            proptest::prop_assert_eq!(packed.iter().collect::<Vec<_>>(), each);

            let keys: Vec<i32> = keys.into_iter().map(|k| k % entries as i32).collect();
            let entries = Among::Entries { keys: &keys, matches: wanted[..entries].to_vec() };
            let rows = Among::Rows(keys.iter().map(|&k| wanted[k as usize]).collect());
            for among in [entries, rows] {
                let each: Vec<bool> = (0..keys.len()).map(|i| among.get(i)).collect();
                proptest::prop_assert_eq!(among.pack().iter().collect::<Vec<_>>(), each);
            }
        }
    }
}

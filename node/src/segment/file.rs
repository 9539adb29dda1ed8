//! One immutable segment: the rows of one table and one time bucket, sorted, in a Parquet
//! file (ZSTD, dictionary and delta encodings, min/max statistics per row group and page, a
//! bloom filter on trace ids). Written once by a flush or a compaction, never modified.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::bloom_filter::Sbbf;
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::{ArrowPredicateFn, ArrowReaderOptions, RowFilter};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::statistics::Statistics;

use super::layout::{assemble, companion_columns, stored_value, Layout};
use super::scan::{message_matches, Scan};
use super::table::{from_record_batch, same_project, to_segment_batch, Row, RowRef, Table};
use super::token_index::{line_terms, TokenIndex, FOOTER_KEY as TOKENS_KEY, LEGACY_FOOTER_KEY};
use super::user_number::{user_field, IdHashes, USER, USER_ID};
use crate::archive::FileEntry;
use sextant_model::text::LogQuery;

/// Rows per row group: small enough that a trace lookup decodes little, large enough that
/// per-row-group metadata stays a small fraction of the file.
const ROW_GROUP_ROWS: usize = 8192;
const BATCHES_KEY: &str = "sextant.batches";

/// Rows per row group of `table`. Events are read by whole day segments (funnels, retention,
/// active users) and never looked up by a rare key, so their row groups are 8× larger: each
/// column chunk a reader opens costs a ZSTD context and its buffers (a tenth of a funnel's
/// time with 8k-row groups).
fn rows_per_group(table: Table) -> usize {
    if table == Table::Events {
        8 * ROW_GROUP_ROWS
    } else {
        ROW_GROUP_ROWS
    }
}

/// What the manifest records about a segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMeta {
    pub id: u64,
    pub table: Table,
    /// Time bucket: its start in unix seconds (an hour, or a day for events and replays:
    /// [`Table::bucket_seconds`]).
    pub hour: i64,
    pub rows: u64,
    pub min_ns: i64,
    pub max_ns: i64,
    pub file: FileEntry,
    /// For a derived segment (trace summaries, rollups): the spans or events segment it derives
    /// from (replaced with it).
    pub summarizes: Option<u64>,
    /// For a day's span rollups: the ids of the spans segments whose hour rollups it adds
    /// up, sorted. Readers use it only while those are exactly the day's spans segments.
    #[serde(default)]
    pub covers: Vec<u64>,
    /// The projects with rows here, sorted: retention drops a segment without reading it
    /// when every one of them has expired.
    pub projects: Vec<String>,
    /// Written at [`Effort::Draft`]: compaction rewrites it, alone if need be.
    pub draft: bool,
}

/// How hard a segment's free-form columns (messages, the attributes without a column of their
/// own, properties) are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effort {
    /// zstd level 3, like every other column: a flush's small segments of buckets not over
    /// yet, which compaction rewrites (docs/ARCHITECTURE.md, "Compaction and expiry").
    Draft,
    /// zstd level 9 on the free-form columns: log messages take a tenth fewer bytes, for
    /// several times the CPU.
    Final,
}

impl Effort {
    fn text_level(self) -> i32 {
        match self {
            Effort::Draft => 3,
            Effort::Final => 9,
        }
    }
}

pub fn file_name(id: u64) -> String {
    format!("seg-{id:012}.parquet")
}

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Counts and hashes what goes to the file, so the manifest gets the checksum without a
/// second read.
struct HashingWriter {
    inner: io::BufWriter<std::fs::File>,
    hash: Xxh3,
    len: u64,
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn properties(
    table: Table,
    layout: &Layout,
    distinct_traces: usize,
    batches: &[u128],
    effort: Effort,
) -> WriterProperties {
    let schema = table.schema();
    let text = Compression::ZSTD(ZstdLevel::try_new(effort.text_level()).expect("valid level"));
    let idx = |name: &str| schema.index_of(name).expect("column of the table") as i32;
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).expect("valid level")))
        .set_max_row_group_row_count(Some(rows_per_group(table)))
        // Spans: pages of 4k rows, so a trace lookup decodes one page per column, not a row
        // group (measured, 1M spans: 1k-row pages 31.4 B/span and lookups p50 0.94 ms; 2k 30.3
        // B and 1.0 ms; 4k 29.8 B and 1.04 ms: each page costs a header and a ZSTD frame).
        // Other tables are read by whole row groups; one page per column chunk lets
        // compression see all its values together (logs: 1.6 B less per line).
        .set_data_page_row_count_limit(if table == Table::Spans { 4096 } else { rows_per_group(table) })
        .set_data_page_size_limit(if table == Table::Spans { 1 << 20 } else { 8 << 20 })
        // Statistics per row group, for the columns that prune only (no per-page column index:
        // nothing reads it; the offset index, which page skipping needs, is written anyway).
        .set_statistics_enabled(EnabledStatistics::None)
        .set_sorting_columns(Some(
            table
                .sort_columns()
                .iter()
                .map(|c| SortingColumn { column_idx: idx(c), descending: false, nulls_first: false })
                .collect(),
        ))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            BATCHES_KEY.to_owned(),
            batches.iter().map(|b| format!("{b:032x}")).collect::<Vec<_>>().join(","),
        )]));
    for &column in Scan::pruning_columns(table) {
        b = b.set_column_statistics_enabled(ColumnPath::from(column), EnabledStatistics::Chunk);
    }
    // Durations and a trace's end (stored as its duration, see `layout`): random numbers in a
    // small range, the bytes of each significance together.
    for duration in ["duration_ns", "end_ns"] {
        if schema.index_of(duration).is_ok() {
            b = b
                .set_column_dictionary_enabled(ColumnPath::from(duration), false)
                .set_column_encoding(ColumnPath::from(duration), Encoding::BYTE_STREAM_SPLIT);
        }
    }
    for time in ["start_ns", "time_ns"] {
        if schema.index_of(time).is_ok() {
            b = b
                .set_column_dictionary_enabled(ColumnPath::from(time), false)
                .set_column_encoding(ColumnPath::from(time), Encoding::DELTA_BINARY_PACKED);
        }
    }
    if table == Table::Events {
        // Every analytics query reads these two columns whole (measured on day segments of 83k
        // events). Sorted by user, events' times jump back and forth: delta-packed, ZSTD saved
        // 4% of their bytes, and decompressing them took as long as the rest of their reading.
        // Distinct ids keep their dictionary (prefix encoding halves their bytes, but every
        // reader then builds each row's string: a funnel took 30% more CPU than with the
        // dictionary, whose entries it hashes once), in LZ4: a third more bytes than ZSTD for
        // a quarter of the decompression time, which was a sixth of a funnel's.
        b = b
            .set_column_compression(ColumnPath::from("time_ns"), Compression::UNCOMPRESSED)
            .set_column_compression(ColumnPath::from("distinct_id"), Compression::LZ4_RAW)
            .set_column_compression(ColumnPath::from(USER), Compression::LZ4_RAW);
    }
    // The free-form columns are most of the bytes; a slower level pays off there (measured:
    // span attributes 32 -> 25 bytes per span) in the segments that stay. Not in the columns
    // of frequent attribute keys: each holds one key's values, which level 3 compresses as
    // well (docs/BENCHMARKS.md, "Ids built as bytes, attribute columns at zstd level 3").
    for column in ["attributes", "message", "properties", "data"] {
        if schema.index_of(column).is_ok() {
            b = b.set_column_compression(ColumnPath::from(column), text);
        }
    }
    for key in &layout.attribute_keys {
        // Mostly distinct values (pod names, user ids, the last words of split values):
        // dictionary indices would only add to the values themselves. The heads of split
        // values are few and keep their dictionary.
        if key.distinct {
            let text_tail = key.tail == super::attribute_columns::Tail::Text;
            let text = [key.whole.then(|| key.column()), (key.split && text_tail).then(|| key.tail_column())];
            for col in text.into_iter().flatten() {
                b = b
                    .set_column_dictionary_enabled(ColumnPath::from(col.as_str()), false)
                    .set_column_encoding(ColumnPath::from(col.as_str()), Encoding::DELTA_LENGTH_BYTE_ARRAY);
            }
            // Like durations: the bytes of each significance together.
            let numbers = [key.ints.then(|| key.int_column()), (key.split && !text_tail).then(|| key.tail_column())];
            for col in numbers.into_iter().flatten() {
                b = b
                    .set_column_dictionary_enabled(ColumnPath::from(col.as_str()), false)
                    .set_column_encoding(ColumnPath::from(col.as_str()), Encoding::BYTE_STREAM_SPLIT);
            }
        }
    }
    // Mostly distinct values; a summary's trace id too (one row per trace).
    let unique_columns: &[&str] = match table {
        Table::Logs => &["span_id", "message"],
        Table::TraceSummaries => &["trace_id"],
        _ => &["span_id", "parent_span_id"],
    };
    if table == Table::Logs {
        // A log's trace id is mostly distinct too (logs are sorted by time, not trace), but
        // plain: each id's length next to its leading bytes, which the ids of one client or
        // batch share, lets ZSTD match both (measured: 8.99 → 8.38 B/line, against
        // delta-length encoding).
        b = b
            .set_column_dictionary_enabled(ColumnPath::from("trace_id"), false)
            .set_column_encoding(ColumnPath::from("trace_id"), Encoding::PLAIN);
    }
    for &unique in unique_columns {
        if schema.index_of(unique).is_ok() {
            b = b
                .set_column_dictionary_enabled(ColumnPath::from(unique), false)
                .set_column_encoding(ColumnPath::from(unique), Encoding::DELTA_LENGTH_BYTE_ARRAY);
        }
    }
    if schema.index_of("trace_id").is_ok() {
        let col = ColumnPath::from("trace_id");
        b = b
            .set_column_bloom_filter_enabled(col.clone(), true)
            .set_column_bloom_filter_fpp(col.clone(), 0.01)
            .set_column_bloom_filter_max_ndv(col, distinct_traces.clamp(16, ROW_GROUP_ROWS) as u64);
    }
    b.build()
}

/// Writes `rows` (all of `table`, sorted by the table's sort order) as segment `id` in `dir`
/// and fsyncs it, with `users` (one per row) as the [`USER`] column. The caller makes it
/// durable in the manifest (and fsyncs `dir`).
#[allow(clippy::too_many_arguments)]
pub fn write(
    dir: &Path,
    id: u64,
    table: Table,
    hour: i64,
    rows: &[RowRef<'_>],
    batches: &[u128],
    users: Option<&[u32]>,
    effort: Effort,
) -> io::Result<SegmentMeta> {
    let name = file_name(id);
    let file = std::fs::File::create(dir.join(&name))?;
    let mut out = HashingWriter { inner: io::BufWriter::with_capacity(1 << 20, file), hash: Xxh3::new(), len: 0 };
    let Extent { min_ns, max_ns, distinct_keys, projects } = Extent::of(rows);
    let distinct_traces = if table == Table::Spans { distinct_keys } else { rows.len() };
    let layout = Layout::choose(table, rows);
    let mut schema = layout.schema(table);
    if users.is_some() {
        let fields = schema.fields().iter().cloned().chain([Arc::new(user_field())]);
        schema = Arc::new(arrow_schema::Schema::new(fields.collect::<Vec<_>>()));
    }
    let mut writer = ArrowWriter::try_new(
        &mut out,
        schema.clone(),
        Some(properties(table, &layout, distinct_traces, batches, effort)),
    )
    .map_err(err)?;
    let mut tokens = (table == Table::Logs).then(TokenIndex::default);
    let per_group = rows_per_group(table);
    for (k, chunk) in rows.chunks(per_group).enumerate() {
        let mut rb = to_segment_batch(table, chunk, &layout).map_err(err)?;
        if let Some(users) = users {
            let numbers = UInt32Array::from(users[k * per_group..][..chunk.len()].to_vec());
            let columns = rb.columns().iter().cloned().chain([Arc::new(numbers) as ArrayRef]).collect();
            rb = RecordBatch::try_new(schema.clone(), columns).map_err(err)?;
        }
        writer.write(&rb).map_err(err)?;
        // One chunk, one row group: the token index is per row group.
        writer.flush().map_err(err)?;
        if let Some(index) = tokens.as_mut() {
            let mut terms = Vec::new();
            for r in chunk {
                match (r.row, r.terms) {
                    (Row::Log(_), Some(known)) => terms.extend_from_slice(known),
                    (Row::Log(l), None) => line_terms(l, &mut terms),
                    _ => {}
                }
            }
            index.push_group(terms);
        }
    }
    if let Some(index) = tokens {
        writer.append_key_value_metadata(KeyValue::new(TOKENS_KEY.to_owned(), index.encode()));
    }
    writer.close().map_err(err)?;
    out.flush()?;
    let HashingWriter { inner, hash, len } = out;
    inner.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(SegmentMeta {
        id,
        table,
        hour,
        rows: rows.len() as u64,
        min_ns,
        max_ns,
        file: FileEntry { name, len, xxh3: hash.digest() },
        summarizes: None,
        covers: Vec::new(),
        projects,
        draft: effort == Effort::Draft,
    })
}

/// What a segment's metadata says of its rows, gathered in one pass over them.
struct Extent {
    min_ns: i64,
    max_ns: i64,
    /// How many runs of equal sort texts (of spans: traces).
    distinct_keys: usize,
    /// The projects, sorted.
    projects: Vec<String>,
}

impl Extent {
    fn of(rows: &[RowRef<'_>]) -> Self {
        let (mut min_ns, mut max_ns, mut distinct_keys) = (i64::MAX, i64::MIN, 0);
        let mut projects: Vec<&str> = Vec::new();
        let mut last: Option<&str> = None;
        for r in rows {
            let (key, t) = (r.row.sort_key().0, r.row.time_ns());
            (min_ns, max_ns) = (min_ns.min(t), max_ns.max(t));
            distinct_keys += usize::from(last != Some(key));
            last = Some(key);
            if projects.last().is_none_or(|p| !same_project(p, r.project)) {
                projects.push(r.project);
            }
        }
        projects.sort_unstable();
        projects.dedup();
        Extent {
            min_ns,
            max_ns,
            distinct_keys: distinct_keys.max(1),
            projects: projects.into_iter().map(str::to_owned).collect(),
        }
    }
}

/// A segment file, mapped into memory: readers on every thread slice column chunks out of
/// it without copying them (reading them with `pread` into fresh buffers, zeroed first, was a
/// twentieth of a funnel's time), and it stays readable after a compaction unlinks it.
#[derive(Clone)]
pub struct SegmentFile(bytes::Bytes);

impl SegmentFile {
    fn map(file: &std::fs::File) -> io::Result<SegmentFile> {
        // SAFETY: segment files are written whole and fsynced before they are listed, and
        // never written again (a compaction writes new files and unlinks the old ones, which
        // leaves their pages mapped): the mapped bytes do not change under a reader.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(SegmentFile(bytes::Bytes::from_owner(map)))
    }
}

impl parquet::file::reader::Length for SegmentFile {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

impl parquet::file::reader::ChunkReader for SegmentFile {
    type T = bytes::buf::Reader<bytes::Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        Ok(self.0.slice((start as usize).min(self.0.len())..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        let start = start as usize;
        if start.checked_add(length).is_none_or(|end| end > self.0.len()) {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "{length} bytes at {start} of a {}-byte segment",
                self.0.len()
            )));
        }
        Ok(self.0.slice(start..start + length))
    }
}

/// `f`, parquet decoding of segment `name`, where a panic is a corrupted page (see
/// `Segment::each_batch`).
fn decoding<T>(name: &str, f: impl FnOnce() -> T) -> io::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{name}: corrupted page")))
}

/// The footer's column chunk and page offsets, checked against the file: parquet asserts on
/// a negative one, and subtracts a page index's offsets and first rows unchecked.
fn check_chunks(md: &parquet::file::metadata::ParquetMetaData, file_len: u64) -> Result<(), String> {
    for (i, rg) in md.row_groups().iter().enumerate() {
        let pages = md.page_index_for_row_group(i);
        for (c, col) in rg.columns().iter().enumerate() {
            let start = col.dictionary_page_offset().unwrap_or(col.data_page_offset());
            let end = start.checked_add(col.compressed_size()).filter(|&e| start >= 0 && e >= start);
            let Some(end) = end.filter(|&e| e as u64 <= file_len) else {
                return Err(format!("row group {i}, column {c}: chunk outside the file"));
            };
            // Pages in order, inside the chunk, each starting on a later row of the group.
            let (mut at, mut row) = (start, -1);
            for p in pages.page_locations(c).into_iter().flatten() {
                let page_end = p.offset.checked_add(i64::from(p.compressed_page_size));
                let rows_ok = p.first_row_index > row && p.first_row_index < rg.num_rows().max(1);
                if p.offset < at || p.compressed_page_size < 0 || page_end.is_none_or(|e| e > end) || !rows_ok {
                    return Err(format!("row group {i}, column {c}: page index out of order or outside its chunk"));
                }
                (at, row) = (p.offset, p.first_row_index);
            }
        }
    }
    Ok(())
}

/// An open segment: parsed footer, batch ids and trace-id bloom filters stay in memory so a
/// lookup reads only the row groups that may hold the trace.
pub struct Segment {
    pub meta: SegmentMeta,
    file: SegmentFile,
    reader: ArrowReaderMetadata,
    /// Raft batch ids of the rows; a row's `batch` column indexes this list.
    pub batches: Arc<Vec<u128>>,
    trace_blooms: Vec<Option<Sbbf>>,
    tokens: Option<TokenIndex>,
    /// See [`Segment::heap_bytes`]: the segment never changes once open, so counted then.
    heap_bytes: usize,
}

impl Segment {
    /// Heap bytes it keeps while open: the parsed footer, batch ids, bloom filters and token
    /// index (the file itself is mapped, not counted).
    pub fn heap_bytes(&self) -> usize {
        self.heap_bytes
    }

    pub fn open(dir: &Path, meta: SegmentMeta) -> io::Result<Segment> {
        let path = dir.join(&meta.file.name);
        let file = std::fs::File::open(&path)?;
        if file.metadata()?.len() != meta.file.len {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} has the wrong size", meta.file.name)));
        }
        Self::from_file(meta, SegmentFile::map(&file)?)
    }

    /// A segment from bytes in memory (fuzzing reads corrupted copies this way).
    pub fn from_bytes(meta: SegmentMeta, bytes: bytes::Bytes) -> io::Result<Segment> {
        Self::from_file(meta, SegmentFile(bytes))
    }

    fn from_file(meta: SegmentMeta, file: SegmentFile) -> io::Result<Segment> {
        let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
        let reader = ArrowReaderMetadata::load(&file, options).map_err(err)?;
        super::layout::check_schema(meta.table, reader.schema())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", meta.file.name)))?;
        check_chunks(reader.metadata(), file.0.len() as u64)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", meta.file.name)))?;
        let footer = |key: &str| {
            reader
                .metadata()
                .file_metadata()
                .key_value_metadata()
                .and_then(|kv| kv.iter().find(|k| k.key == key))
                .and_then(|kv| kv.value.clone())
        };
        let unreadable =
            || io::Error::new(io::ErrorKind::InvalidData, format!("{}: unreadable token index", meta.file.name));
        let tokens = match (footer(TOKENS_KEY), footer(LEGACY_FOOTER_KEY)) {
            (Some(text), _) => Some(TokenIndex::decode(&text).ok_or_else(unreadable)?),
            (None, Some(text)) => Some(TokenIndex::decode_legacy(&text).ok_or_else(unreadable)?),
            (None, None) => None,
        };
        let batches: Vec<u128> = footer(BATCHES_KEY)
            .as_deref()
            .map(|v| v.split(',').filter(|s| !s.is_empty()).filter_map(|h| u128::from_str_radix(h, 16).ok()).collect())
            .unwrap_or_default();
        let mut trace_blooms = Vec::new();
        if let Ok(col) = meta.table.schema().index_of("trace_id") {
            let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file.clone(), reader.clone());
            for rg in 0..reader.metadata().num_row_groups() {
                let bloom = builder.get_row_group_column_bloom_filter(rg, col).map_err(err)?;
                // A corrupted header can leave a filter without blocks, which `check` indexes.
                if let Some(b) = &bloom {
                    decoding(&meta.file.name, || b.check(&[0u8][..]))?;
                }
                trace_blooms.push(bloom);
            }
        }
        let heap_bytes = reader.metadata().memory_size()
            + batches.capacity() * 16
            + trace_blooms.iter().flatten().map(|b| b.num_blocks() * 32).sum::<usize>()
            + tokens.as_ref().map_or(0, TokenIndex::heap_bytes);
        Ok(Segment { meta, file, reader, batches: Arc::new(batches), trace_blooms, tokens, heap_bytes })
    }

    /// Row groups whose statistics and bloom filter allow `(project, trace_id)`.
    fn trace_row_groups(&self, project: &str, trace_id: &str) -> Vec<usize> {
        let scan = Scan {
            table: self.meta.table,
            project: project.to_owned(),
            from_ns: i64::MIN,
            to_ns: i64::MAX,
            filter: super::scan::Filter { trace_id: Some(trace_id.to_owned()), ..Default::default() },
            columns: Vec::new(),
            dictionaries: Vec::new(),
            stored_ids: false,
        };
        self.candidate_row_groups(&scan)
    }

    /// Reads whole row groups (all of them when `row_groups` is None) back into rows.
    pub fn read(&self, row_groups: Option<Vec<usize>>) -> io::Result<Vec<(String, Row, u32)>> {
        let rgs = row_groups.unwrap_or_else(|| (0..self.reader.metadata().num_row_groups()).collect());
        let mut out = Vec::new();
        self.each_batch(
            &self.reader,
            &rgs,
            None,
            false,
            || None,
            |rb| {
                out.extend(from_record_batch(self.meta.table, &rb));
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// The uuid keys ([`super::uuids::key`]) of an analytics segment's rows, except those of
    /// `hidden` batches, reading only the project, uuid and batch columns.
    pub fn uuid_keys(&self, hidden: &dyn Fn(u128) -> bool, mut f: impl FnMut(u64)) -> io::Result<()> {
        let table = self.meta.table;
        let schema = table.schema();
        if schema.index_of("uuid").is_err() {
            return Ok(());
        }
        let columns = ["project", "uuid", "batch"].map(|c| schema.index_of(c).expect("analytics columns"));
        let mask = ProjectionMask::roots(self.reader.parquet_schema(), columns);
        self.each_batch_of_every_row_group(&self.reader, &mask, |rb| {
            let c = super::table::Cols(&rb);
            let (projects, uuids, batches) = (c.str("project"), c.str("uuid"), c.u32("batch"));
            // A segment's rows come project by project: each project's keys are seeded once.
            let mut keys: Option<(&str, super::uuids::Keys)> = None;
            for i in 0..rb.num_rows() {
                let hide = self.batches.get(batches.value(i) as usize).is_some_and(|b| hidden(*b));
                if !hide && !uuids.value(i).is_empty() {
                    let project = projects.value(i);
                    let k = match keys {
                        Some((p, k)) if p == project => k,
                        _ => {
                            let k = super::uuids::Keys::new(table, project);
                            keys = Some((project, k));
                            k
                        }
                    };
                    f(k.of(uuids.value(i)));
                }
            }
            Ok(())
        })
    }

    /// Whether it stores user numbers ([`USER`]).
    pub fn has_user_numbers(&self) -> bool {
        self.reader.schema().index_of(USER).is_ok()
    }

    /// The hash of every row's distinct id ([`IdHashes`]) and its stored user number, if the
    /// segment stores them, batch by batch, reading only those columns.
    pub fn each_user(&self, mut f: impl FnMut(&[u128], Option<&[u32]>)) -> io::Result<()> {
        let file_schema = self.reader.schema();
        let Ok(ids) = file_schema.index_of(USER_ID) else { return Ok(()) };
        let columns = std::iter::once(ids).chain(file_schema.index_of(USER).ok());
        let mask = ProjectionMask::roots(self.reader.parquet_schema(), columns);
        let reader = self.reader_with_dictionaries(&[USER_ID])?;
        let mut hashes = IdHashes::default();
        self.each_batch_of_every_row_group(&reader, &mask, |rb| {
            let c = super::table::Cols(&rb);
            let numbers = rb.column_by_name(USER).map(|_| c.u32(USER).values().as_ref());
            f(&hashes.of(&c.strings(USER_ID)), numbers);
            Ok(())
        })
    }

    /// [`each_batch`](Self::each_batch) of every row group, the `mask` columns only.
    fn each_batch_of_every_row_group(
        &self,
        reader: &ArrowReaderMetadata,
        mask: &ProjectionMask,
        f: impl FnMut(RecordBatch) -> io::Result<()>,
    ) -> io::Result<()> {
        let rgs: Vec<usize> = (0..self.reader.metadata().num_row_groups()).collect();
        self.each_batch(reader, &rgs, Some(mask), false, || None, f)
    }

    /// Hands `f` the batches of `row_groups` in the table's schema ([`assemble`]d), each batch
    /// within one row group: a parent reference finds its row in the same batch. `filter` makes
    /// the row filter of each row group (a `RowFilter` is used up by one reader).
    fn each_batch(
        &self,
        reader: &ArrowReaderMetadata,
        row_groups: &[usize],
        projection: Option<&ProjectionMask>,
        stored_ids: bool,
        filter: impl Fn() -> Option<RowFilter>,
        mut f: impl FnMut(RecordBatch) -> io::Result<()>,
    ) -> io::Result<()> {
        for &rg in row_groups {
            let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(self.file.clone(), reader.clone())
                .with_row_groups(vec![rg])
                .with_batch_size(ROW_GROUP_ROWS);
            if let Some(mask) = projection {
                builder = builder.with_projection(mask.clone());
            }
            if let Some(filter) = filter() {
                builder = builder.with_row_filter(filter);
            }
            // parquet's page decoders index a page's contents unchecked: a corrupted page
            // panics in them (in `build` too, which runs the row filter), which is this
            // segment's error here (docs/RELIABILITY.md).
            let name = &self.meta.file.name;
            let mut batches = decoding(name, || builder.build())?.map_err(err)?;
            while let Some(rb) = decoding(name, || batches.next())? {
                f(assemble(rb.map_err(err)?, stored_ids).map_err(err)?)?;
            }
        }
        Ok(())
    }

    /// Compressed bytes of each column, over all row groups (for storage reports).
    pub fn column_bytes(&self) -> Vec<(String, u64)> {
        let md = self.reader.metadata();
        let mut out: Vec<(String, u64)> =
            md.file_metadata().schema_descr().columns().iter().map(|c| (c.path().string(), 0)).collect();
        for rg in md.row_groups() {
            for (i, c) in rg.columns().iter().enumerate() {
                out[i].1 += c.compressed_size() as u64;
            }
        }
        out
    }

    /// Row groups that may hold rows `scan` selects: by statistics, the trace-id bloom filter
    /// and the token index.
    pub fn candidate_row_groups(&self, scan: &Scan) -> Vec<usize> {
        let terms = scan.required_terms();
        let file = self.reader.schema();
        let probe = scan.filter.trace_id.as_deref().map(|t| stored_value(file, "trace_id", t));
        self.reader
            .metadata()
            .row_groups()
            .iter()
            .enumerate()
            .filter(|(i, rg)| {
                scan.wants_row_group(rg, file)
                    && scan.wants_row_group_by_terms(self.tokens.as_ref(), *i, &terms)
                    && probe.as_ref().is_none_or(|t| {
                        // An id stored as null is not in the bloom filter: no pruning by it.
                        t.as_deref().is_none_or(|t| {
                            self.trace_blooms.get(*i).and_then(|b| b.as_ref()).is_none_or(|b| b.check(t))
                        })
                    })
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// What `scan` would read here, from the footer alone: the rows of its candidate row groups
    /// and the compressed bytes of the column chunks it would decode in them.
    pub fn estimate(&self, scan: &Scan) -> (u64, u64) {
        if !scan.wants_segment(self.meta.table, self.meta.min_ns, self.meta.max_ns) {
            return (0, 0);
        }
        let schema = self.meta.table.schema();
        let only_project = self.meta.projects.len() == 1 && self.meta.projects[0] == scan.project;
        // Root columns read (None: all), as `scan_row_groups` projects them.
        let roots: Option<Vec<usize>> = scan.read_columns(only_project, false).map(|cols| {
            let mut roots: Vec<usize> = cols.iter().filter_map(|c| schema.index_of(c).ok()).collect();
            roots.extend(companion_columns(&cols, self.reader.schema()));
            roots
        });
        let parquet = self.reader.parquet_schema();
        let row_groups = self.reader.metadata().row_groups();
        let (mut rows, mut bytes) = (0u64, 0u64);
        for rg in self.candidate_row_groups(scan) {
            let rg = &row_groups[rg];
            rows += rg.num_rows().max(0) as u64;
            bytes += match &roots {
                None => rg.compressed_size().max(0) as u64,
                Some(roots) => rg
                    .columns()
                    .iter()
                    .enumerate()
                    .filter(|(leaf, _)| roots.contains(&parquet.get_column_root_idx(*leaf)))
                    .map(|(_, c)| c.compressed_size().max(0) as u64)
                    .sum(),
            };
        }
        (rows, bytes)
    }

    /// The rows of this segment that `scan` selects; `hidden` are tombstoned batch ids.
    pub fn scan(&self, scan: &Scan, hidden: &dyn Fn(u128) -> bool) -> io::Result<Vec<RecordBatch>> {
        if !scan.wants_segment(self.meta.table, self.meta.min_ns, self.meta.max_ns) {
            return Ok(Vec::new());
        }
        let row_groups = self.candidate_row_groups(scan);
        self.scan_row_groups(scan, row_groups, hidden)
    }

    /// The candidate row groups of `scan` (see [`candidate_row_groups`](Self::candidate_row_groups)),
    /// each with the latest time it can hold: its time column's maximum, else the segment's.
    pub fn row_groups_by_time(&self, scan: &Scan) -> Vec<(usize, i64)> {
        if !scan.wants_segment(self.meta.table, self.meta.min_ns, self.meta.max_ns) {
            return Vec::new();
        }
        let time = self.meta.table.schema().index_of(self.meta.table.time_column()).ok();
        let row_groups = self.reader.metadata().row_groups();
        self.candidate_row_groups(scan)
            .into_iter()
            .map(|i| {
                let max = time
                    .and_then(|c| match row_groups[i].column(c).statistics()? {
                        Statistics::Int64(v) => v.max_opt().copied(),
                        _ => None,
                    })
                    .unwrap_or(self.meta.max_ns);
                (i, max)
            })
            .collect()
    }

    /// The rows of `row_groups` (candidates of `scan`) that `scan` selects.
    pub fn scan_row_groups(
        &self,
        scan: &Scan,
        row_groups: Vec<usize>,
        hidden: &dyn Fn(u128) -> bool,
    ) -> io::Result<Vec<RecordBatch>> {
        if row_groups.is_empty() {
            return Ok(Vec::new());
        }
        let schema = self.meta.table.schema();
        // Most segments of a single-tenant install hold one project: then the project column
        // is neither decoded nor compared.
        let only_project = self.meta.projects.len() == 1 && self.meta.projects[0] == scan.project;
        let projection = |cols: Option<Vec<String>>| {
            cols.map(|cols| {
                let mut indices: Vec<usize> = cols.iter().filter_map(|c| schema.index_of(c).ok()).collect();
                indices.extend(companion_columns(&cols, self.reader.schema()));
                ProjectionMask::roots(self.reader.parquet_schema(), indices)
            })
        };
        let any_hidden = self.batches.iter().any(|b| hidden(*b));
        let masked = projection(scan.read_columns(only_project, !any_hidden));
        // Row groups that match whole skip the mask and its columns.
        let whole = projection((!scan.columns.is_empty()).then(|| scan.columns.clone()));
        let hidden_ordinal = |ord: u32| self.batches.get(ord as usize).is_some_and(|b| hidden(*b));
        let reader = self.reader_with_dictionaries(&scan.dictionary_columns())?;
        let row_group_meta = self.reader.metadata().row_groups();
        // Log searches: the message column is decoded and matched first, and the other columns
        // (ids and attributes, rebuilt from their stored layout) only for matching lines.
        // No row filter for events: read as dictionaries, their ids and names cost little for
        // the rows the mask then drops, while a row filter decoded the event column twice and
        // the others in thousands of short runs (a funnel's steps are often a third of the
        // rows: page views), 40% of a funnel's scan.
        let by_message = match (&scan.filter.log_query, self.meta.table) {
            (Some(q), Table::Logs) => Some(self.message_filter(q.clone())?),
            _ => None,
        };
        let filter = || by_message.as_ref().and_then(|f| f());
        let mut out = Vec::new();
        for rg in row_groups {
            if !any_hidden && scan.selects_whole_row_group(&row_group_meta[rg], &schema) {
                self.each_batch(&reader, &[rg], whole.as_ref(), scan.stored_ids, filter, |rb| {
                    out.push(scan.returned_columns(&rb).map_err(err)?);
                    Ok(())
                })?;
                continue;
            }
            self.each_batch(&reader, &[rg], masked.as_ref(), scan.stored_ids, filter, |rb| {
                if let Some(kept) = scan.apply(&rb, &hidden_ordinal).map_err(err)? {
                    out.push(kept);
                }
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// The reader of this segment with `columns` read as dictionaries of strings (the others
    /// as the file's schema has them). Only columns stored with a dictionary are: the reader
    /// would build one for the others, row by row.
    fn reader_with_dictionaries(&self, columns: &[&str]) -> io::Result<ArrowReaderMetadata> {
        let md = self.reader.metadata();
        let leaves = md.file_metadata().schema_descr().columns();
        let stored_with_dictionary = |name: &str| {
            leaves.iter().position(|c| c.name() == name).is_some_and(|i| {
                md.row_groups().first().is_some_and(|rg| rg.column(i).dictionary_page_offset().is_some())
            })
        };
        let columns: Vec<&str> = columns.iter().copied().filter(|c| stored_with_dictionary(c)).collect();
        if columns.is_empty() {
            return Ok(self.reader.clone());
        }
        let schema = self.reader.schema();
        let fields: Vec<arrow_schema::Field> = schema
            .fields()
            .iter()
            .map(|f| {
                let f = f.as_ref().clone();
                if columns.contains(&f.name().as_str()) && *f.data_type() == DataType::Utf8 {
                    f.with_data_type(DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)))
                } else {
                    f
                }
            })
            .collect();
        let schema = Arc::new(arrow_schema::Schema::new_with_metadata(fields, schema.metadata().clone()));
        let options = ArrowReaderOptions::new().with_schema(schema).with_page_index_policy(PageIndexPolicy::Optional);
        ArrowReaderMetadata::try_new(self.reader.metadata().clone(), options).map_err(err)
    }

    /// Makes row filters (one per reader) keeping the rows of `project` (any project: None)
    /// whose string `column` holds one of `values`: these columns are decoded first, the
    /// others only for those rows. `values` are compared in the column's stored form, which is
    /// all the predicate sees (the column is read as the file stores it, not as a dictionary).
    fn row_filter(
        &self,
        project: Option<&str>,
        column: &'static str,
        values: &[String],
    ) -> io::Result<impl Fn() -> Option<RowFilter>> {
        let schema = self.meta.table.schema();
        let mut columns = vec![schema.index_of(column).map_err(err)?];
        if project.is_some() {
            columns.push(schema.index_of("project").map_err(err)?);
        }
        let mask = ProjectionMask::roots(self.reader.parquet_schema(), columns);
        let project = project.map(str::to_owned);
        let stored: Vec<Option<Vec<u8>>> =
            values.iter().map(|v| stored_value(self.reader.schema(), column, v).map(|v| v.into_owned())).collect();
        Ok(move || {
            let (project, stored) = (project.clone(), stored.clone());
            let predicate = ArrowPredicateFn::new(mask.clone(), move |rb: RecordBatch| {
                let cols = super::table::Cols(&rb);
                let is_stored = |v: Option<&[u8]>| stored.iter().any(|s| s.as_deref() == v);
                let values = cols.bytes(column);
                let projects = project.as_ref().map(|p| (cols.str("project"), p));
                Ok((0..rb.num_rows())
                    .map(|i| Some(is_stored(values.value(i)) && projects.is_none_or(|(c, p)| c.value(i) == p)))
                    .collect())
            });
            Some(RowFilter::new(vec![Box::new(predicate) as Box<dyn parquet::arrow::arrow_reader::ArrowPredicate>]))
        })
    }

    /// Makes row filters (one per reader) keeping the log lines whose message matches `query`'s
    /// words and phrases (the scan's mask checks the rest, attribute conditions included).
    fn message_filter(&self, query: LogQuery) -> io::Result<impl Fn() -> Option<RowFilter>> {
        let column = self.reader.schema().index_of("message").map_err(err)?;
        let mask = ProjectionMask::roots(self.reader.parquet_schema(), [column]);
        Ok(move || {
            let query = query.clone();
            let mut words = Vec::new();
            let predicate = ArrowPredicateFn::new(mask.clone(), move |rb: RecordBatch| {
                let messages = super::table::Cols(&rb).str("message");
                Ok((0..rb.num_rows()).map(|i| Some(message_matches(&query, messages.value(i), &mut words))).collect())
            });
            Some(RowFilter::new(vec![Box::new(predicate) as Box<dyn parquet::arrow::arrow_reader::ArrowPredicate>]))
        })
    }

    /// The rows of one trace, with their batch ordinals. Only the project and trace-id columns
    /// are decoded for the candidate row groups; the other columns only for the trace's rows
    /// (a Parquet row filter, which also skips pages by the page index).
    pub fn trace(&self, project: &str, trace_id: &str) -> io::Result<Vec<(Row, u32)>> {
        let rgs = self.trace_row_groups(project, trace_id);
        if rgs.is_empty() {
            return Ok(Vec::new());
        }
        let filter = self.row_filter(Some(project), "trace_id", &[trace_id.to_owned()])?;
        let mut out = Vec::new();
        self.each_batch(&self.reader, &rgs, None, false, filter, |rb| {
            out.extend(from_record_batch(self.meta.table, &rb).into_iter().map(|(_, row, b)| (row, b)));
            Ok(())
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::scan::Filter;
    use crate::segment::table::SpanRow;
    use crate::segment::table::{Cols, Strings};

    fn span(i: u64) -> Row {
        Row::Span(SpanRow {
            trace_id: format!("t{:03}", i / 4),
            span_id: format!("s{i}"),
            service_name: ["web", "api", "db"][i as usize % 3].into(),
            operation: format!("op{}", i % 5),
            start_unix_nanos: 1_000 + i as i64,
            duration_nanos: (i + 1) * 1_000,
            ..Default::default()
        })
    }

    fn scan(project: &str, from_ns: i64, filter: Filter) -> Scan {
        Scan {
            table: Table::Spans,
            project: project.into(),
            from_ns,
            to_ns: i64::MAX,
            filter,
            columns: vec!["service".into(), "operation".into(), "duration_ns".into()],
            dictionaries: vec!["service", "operation"],
            stored_ids: false,
        }
    }

    /// A draft segment (a flush's, for compaction to rewrite) compresses its free-form columns
    /// (here log messages) less: more bytes, the same rows, and marked as a draft.
    #[test]
    fn a_draft_holds_the_same_rows_in_more_bytes_and_says_so() {
        use super::super::table::LogRow;
        let rows: Vec<Row> = (0..5_000u64)
            .map(|i| {
                Row::Log(LogRow {
                    unix_nanos: 1_000 + i as i64,
                    service: ["web", "api", "db"][i as usize % 3].into(),
                    message: format!(
                        "deadline exceeded after {} ms calling https://shop.example/api/products/{}?page={}",
                        i * 31 % 5000,
                        i * 7919 % 1000,
                        i % 13
                    ),
                    ..Default::default()
                })
            })
            .collect();
        let refs: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
        let dir = tempfile::tempdir().unwrap();
        let draft = write(dir.path(), 1, Table::Logs, 0, &refs, &[1], None, Effort::Draft).unwrap();
        let last = write(dir.path(), 2, Table::Logs, 0, &refs, &[1], None, Effort::Final).unwrap();
        assert!(draft.draft && !last.draft);
        assert!(draft.file.len > last.file.len, "{} bytes as a draft, {} final", draft.file.len, last.file.len);
        let read = |meta: SegmentMeta| Segment::open(dir.path(), meta).unwrap().read(None).unwrap();
        assert_eq!(read(draft), read(last));
    }

    /// Analytics scans name a few event names and read `event` and `distinct_id` as
    /// dictionaries: the mask compares dictionary entries, and gives the same rows as strings
    /// do, in a segment shared by two projects whose row groups hold more than 8k events.
    #[test]
    fn event_filters_read_the_same_rows_from_dictionaries_and_strings() {
        use sextant_model::row::Event;
        let dir = tempfile::tempdir().unwrap();
        let names = ["pageview", "signup", "action_7", "purchase"];
        let rows: Vec<Row> = (0..20_000u64)
            .map(|i| {
                Row::Event(Event {
                    uuid: String::new(),
                    event: names[(i * 7 % 11) as usize % names.len()].into(),
                    distinct_id: format!("user-{}", i % 997),
                    unix_nanos: 1_000 + i as i64,
                    properties_json: "{}".into(),
                })
            })
            .collect();
        let refs: Vec<RowRef<'_>> =
            rows.iter().enumerate().map(|(i, row)| RowRef::new(if i % 5 == 0 { "o" } else { "p" }, row, 0)).collect();
        let segment = Segment::open(
            dir.path(),
            write(dir.path(), 1, Table::Events, 0, &refs, &[1], None, Effort::Final).unwrap(),
        )
        .unwrap();
        let wanted = vec!["signup".to_owned(), "purchase".to_owned()];
        let read = |dictionaries: Vec<&'static str>| {
            let scan = Scan {
                table: Table::Events,
                project: "p".into(),
                from_ns: 0,
                to_ns: i64::MAX,
                filter: Filter { events: wanted.clone(), ..Default::default() },
                columns: vec!["distinct_id".into(), "time_ns".into(), "event".into()],
                dictionaries,
                stored_ids: false,
            };
            let mut out = Vec::new();
            for rb in segment.scan(&scan, &|_| false).unwrap() {
                let c = Cols(&rb);
                let (ids, times, events) = (c.strings("distinct_id"), c.i64("time_ns"), c.strings("event"));
                assert_eq!(matches!(events, Strings::Dictionary { .. }), scan.dictionaries.contains(&"event"));
                assert_eq!(matches!(ids, Strings::Dictionary { .. }), scan.dictionaries.contains(&"distinct_id"));
                out.extend(
                    (0..rb.num_rows()).map(|i| (times.value(i), ids.value(i).to_owned(), events.value(i).to_owned())),
                );
            }
            out.sort();
            out
        };
        let mut expected: Vec<(i64, String, String)> = refs
            .iter()
            .filter_map(|r| match r.row {
                Row::Event(e) if r.project == "p" && wanted.contains(&e.event) => {
                    Some((e.unix_nanos, e.distinct_id.clone(), e.event.clone()))
                }
                _ => None,
            })
            .collect();
        expected.sort();
        assert!(expected.len() > 5_000);
        assert_eq!(read(vec!["event"]), expected);
        assert_eq!(read(vec!["event", "distinct_id"]), expected);
        assert_eq!(read(Vec::new()), expected);
    }

    /// A row group of one project inside the range is read without the row mask and its
    /// columns, with the asked string columns as dictionaries; a row group shared by two
    /// projects, a range cutting a row group, or a filter on a dictionary column read the
    /// rows through the mask, with the same rows (the mask reads a filtered service either way).
    #[test]
    fn whole_row_groups_skip_the_mask_and_dictionaries_read_the_same_strings() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<Row> = (0..100).map(span).collect();
        let one: Vec<RowRef<'_>> = rows.iter().map(|row| RowRef::new("p", row, 0)).collect();
        let two: Vec<RowRef<'_>> =
            rows.iter().enumerate().map(|(i, row)| RowRef::new(if i < 30 { "o" } else { "p" }, row, 0)).collect();
        let open = |id: u64, rows: &[RowRef<'_>]| {
            Segment::open(dir.path(), write(dir.path(), id, Table::Spans, 0, rows, &[1], None, Effort::Final).unwrap())
                .unwrap()
        };
        let (single, shared) = (open(1, &one), open(2, &two));
        let schema = Table::Spans.schema();
        let rg = |s: &Segment| s.reader.metadata().row_group(0).clone();
        assert!(scan("p", 0, Filter::default()).selects_whole_row_group(&rg(&single), &schema));
        assert!(!scan("p", 1_050, Filter::default()).selects_whole_row_group(&rg(&single), &schema));
        assert!(!scan("p", 0, Filter::default()).selects_whole_row_group(&rg(&shared), &schema));
        let web = Filter { services: vec!["web".into()], ..Default::default() };
        assert!(!scan("p", 0, web.clone()).selects_whole_row_group(&rg(&single), &schema));

        let no_hidden = |_: u128| false;
        let read = |segment: &Segment, scan: &Scan| {
            let mut out = Vec::new();
            for rb in segment.scan(scan, &no_hidden).unwrap() {
                let c = Cols(&rb);
                let (service, operation) = (c.strings("service"), c.strings("operation"));
                for i in 0..rb.num_rows() {
                    let dictionary = matches!(service, Strings::Dictionary { .. });
                    out.push((service.value(i).to_owned(), operation.value(i).to_owned(), dictionary));
                }
                assert_eq!(rb.num_columns(), 3, "only the returned columns");
                assert!(matches!(operation, Strings::Dictionary { .. }));
            }
            out
        };
        let expected = |from: usize, only: Option<&str>, dictionary: bool| -> Vec<(String, String, bool)> {
            rows[from..]
                .iter()
                .filter_map(|r| match r {
                    Row::Span(s) if only.is_none_or(|o| o == s.service_name) => {
                        Some((s.service_name.clone(), s.operation.clone(), dictionary))
                    }
                    _ => None,
                })
                .collect()
        };
        assert_eq!(read(&single, &scan("p", 0, Filter::default())), expected(0, None, true));
        assert_eq!(read(&single, &scan("p", 1_050, Filter::default())), expected(50, None, true));
        assert_eq!(read(&shared, &scan("p", 0, Filter::default())), expected(30, None, true));
        assert_eq!(read(&single, &scan("p", 0, web)), expected(0, Some("web"), true));
    }

    /// Segments are compressed by pooled zstd contexts (the patch in `vendor/zstd`): a context
    /// given back after compressing with a dictionary (copied or referenced) at another level
    /// must not carry either into the next compressor, whose frames any plain decompressor
    /// reads.
    #[test]
    fn pooled_zstd_contexts_start_clean() {
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 977).to_le_bytes()).collect();
        let dictionary = data[..4096].to_vec();
        for _ in 0..3 {
            let mut with_dict = zstd::bulk::Compressor::with_dictionary(19, &dictionary).unwrap();
            let framed = with_dict.compress(&data[..8192]).unwrap();
            assert!(zstd::bulk::decompress(&framed, 8192).is_err(), "a dictionary frame needs it");
            drop(with_dict);
            // A prepared dictionary, which the context only references.
            let prepared = zstd::dict::EncoderDictionary::copy(&dictionary, 19);
            let mut with_ref = zstd::bulk::Compressor::with_prepared_dictionary(&prepared).unwrap();
            let framed = with_ref.compress(&data[..8192]).unwrap();
            assert!(zstd::bulk::decompress(&framed, 8192).is_err(), "a prepared dictionary frame needs it");
            drop(with_ref);
            drop(prepared);
            let mut plain = zstd::bulk::Compressor::new(3).unwrap();
            let first = plain.compress(&data).unwrap();
            let second = plain.compress(&data).unwrap();
            assert_eq!(zstd::bulk::decompress(&first, data.len()).unwrap(), data);
            assert_eq!(first, second, "a reused context compresses alike");
            assert_eq!(first, zstd::bulk::compress(&data, 3).unwrap(), "the same frame as another context's");
        }
    }
}

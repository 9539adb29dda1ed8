//! The short run of every fuzz target (a few seconds each, the same inputs on every run):
//! its seeds and regression inputs (`fuzz/seeds/<target>/`), then edited inputs from a fixed
//! seed. Under the capped allocator, an allocation a corrupted input could ask for aborts.

use std::path::Path;

use sextant_fuzz::short::{run, seeds};
use sextant_fuzz::targets;

#[global_allocator]
static ALLOC: sextant_fuzz::alloc::Capped = sextant_fuzz::alloc::Capped;

fn seeds_of(target: &str) -> Vec<Vec<u8>> {
    seeds(&Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join(target))
}

const JSON: &[&str] = &[
    "\"spans\":",
    "\"logs\":",
    "\"metrics\":",
    "\"events\":",
    "\"timestamp\":",
    "\"duration_ms\":",
    "\"attributes\":",
    "\"properties\":",
    "\"distinct_id\":",
    "\"uuid\":",
    "\"type\":",
    "\"data\":",
    "\"session_id\":",
    "\"level\":",
    "\"message\":",
    "\"token\":",
    "\"batch\":",
    "\"api_key\":",
    "\"$snapshot\"",
    "\"$session_id\":",
    "\"$snapshot_data\":",
    "\"cv\":\"2024-10\"",
];

fn short(target: &str, iterations: usize, max_len: usize, f: fn(&[u8])) {
    run(target, &seeds_of(target), JSON, iterations, max_len, f);
}

#[test]
fn span_bodies_never_panic() {
    short("ingest_spans", 100_000, 4096, targets::ingest_spans);
}

#[test]
fn log_bodies_never_panic() {
    short("ingest_logs", 100_000, 4096, targets::ingest_logs);
}

#[test]
fn metric_bodies_never_panic() {
    short("ingest_metrics", 100_000, 4096, targets::ingest_metrics);
}

#[test]
fn event_batches_never_panic() {
    short("analytics_batch", 100_000, 4096, targets::analytics_batch);
}

#[test]
fn replay_bodies_never_panic() {
    short("analytics_replay", 100_000, 4096, targets::analytics_replay);
}

#[test]
fn posthog_captures_never_panic() {
    short("posthog_capture", 100_000, 4096, targets::posthog_capture);
}

#[test]
fn otlp_protobuf_bodies_never_panic() {
    short("otlp_protobuf", 100_000, 4096, targets::otlp_protobuf);
}

#[test]
fn otlp_json_bodies_never_panic() {
    let tokens = &[
        "\"resourceSpans\":",
        "\"resourceLogs\":",
        "\"resourceMetrics\":",
        "\"scopeSpans\":",
        "\"spans\":",
        "\"logRecords\":",
        "\"dataPoints\":",
        "\"traceId\":",
        "\"spanId\":",
        "\"startTimeUnixNano\":",
        "\"intValue\":",
        "\"kvlistValue\":",
        "\"arrayValue\":",
        "\"asDouble\":",
        "\"system.cpu.utilization\"",
    ];
    run("otlp_json", &seeds_of("otlp_json"), tokens, 100_000, 4096, targets::otlp_json);
}

/// The OTLP seeds reach the mapping: each decodes and maps to stored rows.
#[test]
fn every_otlp_seed_decodes_to_rows() {
    use sextant_router::ingest::otlp::http::Format;
    for (dir, format) in [("otlp_protobuf", Format::Protobuf), ("otlp_json", Format::Json)] {
        for (i, seed) in seeds_of(dir).iter().enumerate() {
            let rows = targets::otlp(format, seed);
            assert!(rows.is_some_and(|n| n > 0), "{dir} seed {i}: {rows:?}");
        }
    }
}

#[test]
fn log_queries_never_panic() {
    let tokens = &["service:", "level:", "trace_id:", "-", "\"", ":", " ", "\t", "\u{85}", "İ", "ß"];
    run("log_query", &seeds_of("log_query"), tokens, 100_000, 2300, targets::log_query);
}

#[test]
fn cohort_conditions_never_panic_and_read_back() {
    let tokens = &[
        "\"count_op\":",
        "\"count\":",
        "\"range\":",
        "\"did_not\"",
        "\">=\"",
        "\"366d\"",
        "\"9999999999w\"",
        "\"conditions\":",
        "\"logic\":",
    ];
    run("cohort_conditions", &seeds_of("cohort_conditions"), tokens, 100_000, 4096, targets::cohort_conditions);
}

#[test]
fn time_values_never_panic() {
    short("time_values", 300_000, 64, targets::time_values);
}

#[test]
fn query_parameters_never_panic() {
    let tokens = &[
        "from=",
        "to=",
        "limit=",
        "cursor=",
        "allow_partial=",
        "service=",
        "min_duration_ms=",
        "&",
        "%2",
        "T",
        "Z",
        "+",
    ];
    run("query_params", &seeds_of("query_params"), tokens, 200_000, 1024, targets::query_params);
}

#[test]
fn token_indexes_never_panic() {
    short("token_index", 300_000, 4096, targets::token_index);
}

#[test]
fn corrupted_manifests_are_errors() {
    short("manifest", 100_000, 256, targets::manifest);
}

#[test]
fn corrupted_raft_logs_are_errors() {
    short("raft_log", 3_000, 1024, targets::raft_log);
}

/// The Raft log seeds reach the entries: the fixture as is, as a whole file, and rebuilt
/// record by record each read back its three live entries (group 3's 2 to 4).
#[test]
fn every_raft_log_seed_reads_its_entries() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/raft_log");
    for seed in ["real.bin", "whole.bin", "records.bin"] {
        let input = std::fs::read(dir.join(seed)).unwrap();
        assert_eq!(targets::raft_log_entries(&input), Some(3), "{seed}");
    }
}

#[test]
fn corrupted_segments_are_errors() {
    short("segment", 8_000, 64, targets::segment);
}

// Regression inputs found by fuzzing (also in the seeds, run by the short runs above).

/// A legacy token index whose length field says 3.5 GB: zstd allocated it whole.
#[test]
fn a_corrupted_legacy_token_index_length_allocates_nothing_large() {
    targets::token_index(b"AQ9300000000000");
}

// Segments: the input edits a real segment written by the code (targets::segment). Each of
// these made the reader panic before its fix.

/// A footer naming a column otherwise: the first read panicked on the missing column.
#[test]
fn a_segment_with_a_renamed_column_is_refused_at_open() {
    targets::segment(include_bytes!("../seeds/segment/regress-renamed-column.bin"));
}

/// A page index whose first page starts before its column chunk (unchecked subtraction).
#[test]
fn a_page_index_outside_its_column_chunk_is_an_error() {
    targets::segment(include_bytes!("../seeds/segment/regress-page-before-chunk.bin"));
}

/// A page index whose pages' first rows are out of order (unchecked subtraction).
#[test]
fn a_page_index_with_rows_out_of_order_is_an_error() {
    targets::segment(include_bytes!("../seeds/segment/regress-page-first-row.bin"));
}

/// A corrupted data page: parquet's decoder indexed past its buffer.
#[test]
fn a_corrupted_page_is_an_error() {
    targets::segment(include_bytes!("../seeds/segment/regress-corrupted-page.bin"));
}

/// A corrupted page of a column a row filter decodes (inside the reader's `build`).
#[test]
fn a_corrupted_page_under_a_row_filter_is_an_error() {
    targets::segment(include_bytes!("../seeds/segment/regress-row-filter-page.bin"));
}

/// A corrupted stored duration: multiplied back by its unit, it overflowed.
#[test]
fn a_corrupted_span_duration_does_not_overflow() {
    targets::segment(include_bytes!("../seeds/segment/regress-duration-overflow.bin"));
}

/// A corrupted bloom filter header leaving the filter without blocks: a trace lookup indexed
/// its first block (long segment runs, twice).
#[test]
fn a_trace_bloom_filter_without_blocks_is_an_error() {
    targets::segment(include_bytes!("../seeds/segment/regress-bloom-without-blocks-1.bin"));
    targets::segment(include_bytes!("../seeds/segment/regress-bloom-without-blocks-2.bin"));
}

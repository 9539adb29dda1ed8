//! Trace summaries: one row per trace and spans segment, so listing traces reads a table
//! several times smaller than the spans and never has to group spans at query time.

use rustc_hash::FxHashSet;
use sextant_model::row::{SpanStatus, TraceSummary};

use super::table::{same_project, Row, RowRef, SpanRow};

/// Summaries of `rows` (spans sorted by project and trace id, as in a segment), one per
/// (project, trace). A span present twice (a retried batch) counts once.
pub fn summarize<'a>(rows: impl IntoIterator<Item = (&'a str, &'a SpanRow)>) -> Vec<(String, TraceSummary)> {
    let mut out: Vec<(String, TraceSummary)> = Vec::new();
    // The span ids of the trace so far; cleared for each trace (a set that grew large for a
    // long trace is dropped instead: clearing takes time in proportion to its capacity).
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    // The project and trace of the last summary, as the rows name them.
    let mut last: Option<(&str, &str)> = None;
    for (project, span) in rows {
        let same = last.is_some_and(|(p, t)| t == span.trace_id && same_project(p, project));
        if !same {
            last = Some((project, &span.trace_id));
            if seen.capacity() > 256 {
                seen = FxHashSet::default();
            }
            seen.clear();
            out.push((project.to_owned(), TraceSummary { trace_id: span.trace_id.clone(), ..empty() }));
        }
        if !seen.insert(&span.span_id) {
            continue;
        }
        let t = &mut out.last_mut().expect("pushed above").1;
        add_span(t, span);
    }
    out
}

fn empty() -> TraceSummary {
    TraceSummary { start_unix_nanos: i64::MAX, end_unix_nanos: i64::MIN, ..Default::default() }
}

fn add_span(t: &mut TraceSummary, s: &SpanRow) {
    let end = s.start_unix_nanos.saturating_add(s.duration_nanos.min(i64::MAX as u64) as i64);
    t.start_unix_nanos = t.start_unix_nanos.min(s.start_unix_nanos);
    t.end_unix_nanos = t.end_unix_nanos.max(end);
    t.span_count += 1;
    if s.status == SpanStatus::Error {
        t.error_count += 1;
    }
    if s.parent_span_id.is_empty() && (t.root_service.is_empty() || s.start_unix_nanos == t.start_unix_nanos) {
        t.root_service = s.service_name.clone();
        t.root_operation = s.operation.clone();
    }
    if let Err(i) = t.services.binary_search(&s.service_name) {
        t.services.insert(i, s.service_name.clone());
    }
}

/// Summary rows for the spans of one segment.
pub fn summary_rows(spans: &[RowRef<'_>]) -> Vec<(String, Row)> {
    summarize(spans.iter().filter_map(|r| match r.row {
        Row::Span(s) => Some((r.project, s)),
        _ => None,
    }))
    .into_iter()
    .map(|(p, t)| (p, Row::TraceSummary(t)))
    .collect()
}

/// The trace summaries of `spans` (of `scan`'s project, none hidden) that `scan` selects.
pub fn select_summaries(scan: &super::Scan, spans: &[RowRef<'_>]) -> Vec<arrow_array::RecordBatch> {
    let summaries = summary_rows(spans);
    let refs: Vec<RowRef<'_>> = summaries.iter().map(|(project, row)| RowRef::new(project, row, 0)).collect();
    scan.select(&refs, None)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn span(
        trace: &str,
        id: &str,
        parent: &str,
        service: &str,
        start: i64,
        dur: u64,
        error: bool,
    ) -> SpanRow {
        SpanRow {
            trace_id: trace.into(),
            span_id: id.into(),
            parent_span_id: parent.into(),
            service_name: service.into(),
            operation: format!("op-{id}"),
            start_unix_nanos: start,
            duration_nanos: dur,
            status: if error { SpanStatus::Error } else { SpanStatus::Unset },
            attributes: Default::default(),
        }
    }

    #[test]
    fn one_summary_per_trace_with_root_counts_and_services() {
        let spans = [
            span("a", "1", "", "web", 100, 50, false),
            span("a", "2", "1", "db", 110, 10, true),
            span("a", "2", "1", "db", 110, 10, true), // retried
            span("b", "3", "9", "db", 5, 1, false),
        ];
        let got = summarize(spans.iter().map(|s| ("p", s)));
        assert_eq!(got.len(), 2);
        let a = &got[0].1;
        assert_eq!((a.start_unix_nanos, a.end_unix_nanos, a.span_count, a.error_count), (100, 150, 2, 1));
        assert_eq!((a.root_service.as_str(), a.root_operation.as_str()), ("web", "op-1"));
        assert_eq!(a.services, ["db", "web"]);
        // Root not (yet) seen.
        assert_eq!(got[1].1.root_service, "");
    }
}

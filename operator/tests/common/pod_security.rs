//! The Pod Security Standards' "restricted" profile (which includes "baseline"), checked on a
//! pod spec as JSON. Written from https://kubernetes.io/docs/concepts/security/pod-security-standards/
//! (Kubernetes 1.33): no installable admission checker runs offline here.

use serde_json::Value;

const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
const SAFE_SYSCTLS: [&str; 11] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
];
const RESTRICTED_VOLUMES: [&str; 8] =
    ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
const SELINUX_TYPES: [&str; 5] = ["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

fn is_true(v: &Value) -> bool {
    v.as_bool() == Some(true)
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// Every rule of "restricted" that `pod` (a PodSpec) breaks, with the offending field; `annotations`
/// are the pod template's (AppArmor's older form).
pub fn restricted_violations(pod: &Value, annotations: &Value) -> Vec<String> {
    let mut out = vec![];
    let psc = &pod["securityContext"];
    let containers: Vec<&Value> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod[*k].as_array().into_iter().flatten())
        .collect();

    // Baseline.
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if is_true(&pod[field]) {
            out.push(format!("{field} is true"));
        }
    }
    if is_true(&psc["windowsOptions"]["hostProcess"]) {
        out.push("securityContext.windowsOptions.hostProcess".into());
    }
    for (name, value) in annotations.as_object().into_iter().flatten() {
        if name.starts_with("container.apparmor.security.beta.kubernetes.io/")
            && !(value == "runtime/default" || value.as_str().is_some_and(|v| v.starts_with("localhost/")))
        {
            out.push(format!("annotation {name}={value}"));
        }
    }
    for sysctl in psc["sysctls"].as_array().into_iter().flatten() {
        let name = sysctl["name"].as_str().unwrap_or_default();
        if !SAFE_SYSCTLS.contains(&name) {
            out.push(format!("sysctl {name}"));
        }
    }
    for volume in pod["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default();
        let kinds: Vec<&String> =
            volume.as_object().into_iter().flatten().map(|(k, _)| k).filter(|k| *k != "name").collect();
        for kind in kinds {
            if !RESTRICTED_VOLUMES.contains(&kind.as_str()) {
                out.push(format!("volume {name} is of type {kind}"));
            }
        }
    }
    let check_context = |out: &mut Vec<String>, sc: &Value, at: &str| {
        let apparmor = sc["appArmorProfile"]["type"].as_str();
        if apparmor == Some("Unconfined") {
            out.push(format!("{at}.appArmorProfile is Unconfined"));
        }
        let se = &sc["seLinuxOptions"];
        if !SELINUX_TYPES.contains(&se["type"].as_str().unwrap_or_default()) {
            out.push(format!("{at}.seLinuxOptions.type"));
        }
        for field in ["user", "role"] {
            if !se[field].is_null() {
                out.push(format!("{at}.seLinuxOptions.{field} is set"));
            }
        }
        if sc["seccompProfile"]["type"].as_str() == Some("Unconfined") {
            out.push(format!("{at}.seccompProfile is Unconfined"));
        }
        if sc["runAsNonRoot"].as_bool() == Some(false) {
            out.push(format!("{at}.runAsNonRoot is false"));
        }
        if sc["runAsUser"].as_i64() == Some(0) {
            out.push(format!("{at}.runAsUser is 0"));
        }
    };
    check_context(&mut out, psc, "securityContext");
    let seccomp_ok = |sc: &Value| matches!(sc["seccompProfile"]["type"].as_str(), Some("RuntimeDefault" | "Localhost"));
    for c in &containers {
        let name = c["name"].as_str().unwrap_or_default();
        let sc = &c["securityContext"];
        let at = format!("container {name}");
        check_context(&mut out, sc, &at);
        if is_true(&sc["privileged"]) {
            out.push(format!("{at} is privileged"));
        }
        if is_true(&sc["windowsOptions"]["hostProcess"]) {
            out.push(format!("{at}.windowsOptions.hostProcess"));
        }
        if sc["procMount"].as_str().is_some_and(|p| p != "Default") {
            out.push(format!("{at}.procMount"));
        }
        for port in c["ports"].as_array().into_iter().flatten() {
            if port["hostPort"].as_i64().is_some_and(|p| p != 0) {
                out.push(format!("{at} uses a hostPort"));
            }
        }
        // Restricted.
        if sc["allowPrivilegeEscalation"].as_bool() != Some(false) {
            out.push(format!("{at}: allowPrivilegeEscalation must be false"));
        }
        if !strs(&sc["capabilities"]["drop"]).contains(&"ALL") {
            out.push(format!("{at}: capabilities must drop ALL"));
        }
        for cap in strs(&sc["capabilities"]["add"]) {
            if cap != "NET_BIND_SERVICE" {
                let level = if BASELINE_CAPABILITIES.contains(&cap) { "restricted" } else { "baseline" };
                out.push(format!("{at} adds capability {cap} ({level})"));
            }
        }
        if !(is_true(&psc["runAsNonRoot"]) || is_true(&sc["runAsNonRoot"])) {
            out.push(format!("{at}: runAsNonRoot must be true (pod or container)"));
        }
        if !(seccomp_ok(psc) || seccomp_ok(sc)) {
            out.push(format!("{at}: seccompProfile must be RuntimeDefault or Localhost (pod or container)"));
        }
    }
    if containers.is_empty() {
        out.push("no containers".into());
    }
    out
}

/// `(where, pod spec, pod annotations)` of every pod template in a rendered object.
pub fn pod_templates(object: &Value) -> Vec<(String, Value, Value)> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = format!("{kind} {}", object["metadata"]["name"].as_str().unwrap_or_default());
    let template = match kind {
        "Pod" => return vec![(name, object["spec"].clone(), object["metadata"]["annotations"].clone())],
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => &object["spec"]["template"],
        "CronJob" => &object["spec"]["jobTemplate"]["spec"]["template"],
        _ => return vec![],
    };
    vec![(name, template["spec"].clone(), template["metadata"]["annotations"].clone())]
}

//! Test-only: the chart's ClusterRole (`charts/sextant/templates/rbac.yaml`) must allow every
//! request the controllers make. The mock API server checks each request against it, so a
//! scenario fails when the code starts using a verb or resource the chart does not grant.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

#[derive(Debug)]
struct Rule {
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

/// The first ClusterRole of a chart template (`rbac.yaml`: the operator's; `uninstall.yaml`: the
/// uninstall hook's). Its rules carry no templating; lines with `{{` are dropped.
fn rules(file: &'static str) -> &'static [Rule] {
    static RULES: OnceLock<Mutex<HashMap<&'static str, &'static [Rule]>>> = OnceLock::new();
    let mut cache = RULES.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner());
    cache.entry(file).or_insert_with(|| {
        let path = format!("{}/../charts/sextant/templates/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let first = text.split("\n---").next().unwrap_or_default();
        let plain: String = first.lines().filter(|l| !l.contains("{{")).map(|l| format!("{l}\n")).collect();
        let role: Value = serde_saphyr::from_str(&plain).expect("the ClusterRole parses");
        assert_eq!(role["kind"], "ClusterRole", "{path}");
        let list = |v: &Value| -> Vec<String> {
            v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
        };
        let rules: Vec<Rule> = role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .map(|r| Rule { groups: list(&r["apiGroups"]), resources: list(&r["resources"]), verbs: list(&r["verbs"]) })
            .collect();
        Vec::leak(rules)
    })
}

/// `(group, resource[/subresource], verb)` of a Kubernetes API request.
pub fn operation(method: &str, path: &str, query: &str) -> Option<(String, String, String)> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (resource, named) = match rest {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => return None,
    };
    let verb = match (method, named) {
        ("GET", true) => "get",
        ("GET", false) if query.contains("watch=true") => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", _) => "delete",
        _ => return None,
    };
    Some((group, resource, verb.to_owned()))
}

pub fn check(method: &str, path: &str, query: &str) -> Result<(), String> {
    check_role("rbac.yaml", method, path, query)
}

/// [`check`] against the first ClusterRole of another chart template.
pub fn check_role(file: &'static str, method: &str, path: &str, query: &str) -> Result<(), String> {
    let (group, resource, verb) =
        operation(method, path, query).ok_or_else(|| format!("unrecognised request {method} {path}"))?;
    let allowed = rules(file)
        .iter()
        .any(|r| r.groups.contains(&group) && r.resources.contains(&resource) && r.verbs.contains(&verb));
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "the ClusterRole of {file} does not allow `{verb}` on `{resource}` in group `{group}` ({method} {path})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_to_rbac_operations() {
        let op = |m, p, q| operation(m, p, q).unwrap();
        assert_eq!(op("GET", "/api/v1/namespaces/t/secrets/x", ""), ("".into(), "secrets".into(), "get".into()));
        assert_eq!(
            op("PATCH", "/apis/sextant.dev/v1alpha1/namespaces/t/projects/p/status", ""),
            ("sextant.dev".into(), "projects/status".into(), "patch".into())
        );
        assert_eq!(
            op("GET", "/apis/sextant.dev/v1alpha1/plans", "watch=true"),
            ("sextant.dev".into(), "plans".into(), "watch".into())
        );
        assert_eq!(
            op("GET", "/apis/sextant.dev/v1alpha1/plans/pro", ""),
            ("sextant.dev".into(), "plans".into(), "get".into())
        );
    }

    #[test]
    fn the_chart_grants_no_more_than_expected() {
        assert!(check("GET", "/api/v1/namespaces/t/secrets/x", "").is_ok());
        assert!(check("POST", "/api/v1/namespaces/t/secrets", "").is_ok());
        // Secrets are created once and never rewritten or listed.
        assert!(check("PATCH", "/api/v1/namespaces/t/secrets/x", "").is_err());
        assert!(check("GET", "/api/v1/secrets", "").is_err());
        assert!(check("DELETE", "/apis/apps/v1/namespaces/t/deployments/x", "").is_err());
        assert!(check("PATCH", "/apis/storage.k8s.io/v1/storageclasses/x", "").is_err());
        assert!(check("GET", "/api/v1/pods", "").is_err());
    }
}

//! A storage node's failure zone, from the Kubernetes node its pod runs on (docs/KUBERNETES.md,
//! "Zones"). The downward API cannot read a Node's labels, so the operator copies the
//! `topology.kubernetes.io/zone` label of each node pod's Node onto the pod as the
//! `sextant.dev/zone` annotation; the pod sees it as a downward-API file, which the kubelet
//! updates in place, and the node reads it again every half second and registers the zone
//! with meta. The operator needs `get` on Nodes and `get`/`patch` on pods for this; the node
//! pods keep running without an API token.

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

/// The well-known label of a Node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The pod annotation the node pod reads its zone from.
pub const ZONE_ANNOTATION: &str = "sextant.dev/zone";

/// The zone of `node`: its zone label, when that is a name a Sextant node accepts.
pub fn node_zone(node: &Node) -> Option<String> {
    let raw = node.metadata.labels.as_ref()?.get(ZONE_LABEL)?;
    sextant_model::zone::parse_zone(raw).ok().flatten()
}

/// The merge patch that brings `pod`'s zone annotation to `zone` (`None` removes it), or
/// nothing when it is already right.
pub fn annotation_patch(pod: &Pod, zone: Option<&str>) -> Option<Value> {
    let current = pod.metadata.annotations.as_ref().and_then(|a| a.get(ZONE_ANNOTATION)).map(String::as_str);
    if current == zone {
        return None;
    }
    Some(json!({"metadata": {"annotations": {ZONE_ANNOTATION: zone}}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "worker-1", "labels": labels}})).unwrap()
    }

    fn pod(annotations: Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "obs-node-0", "annotations": annotations}})).unwrap()
    }

    #[test]
    fn a_node_zone_is_its_label_when_sextant_accepts_the_name() {
        assert_eq!(node_zone(&node(json!({ZONE_LABEL: "eu-west-1a"}))).as_deref(), Some("eu-west-1a"));
        assert_eq!(node_zone(&node(json!({"kubernetes.io/hostname": "w1"}))), None);
        assert_eq!(node_zone(&node(json!({ZONE_LABEL: ""}))), None);
        assert_eq!(node_zone(&node(json!({ZONE_LABEL: "a/b"}))), None);
    }

    #[test]
    fn the_annotation_is_patched_only_when_it_differs() {
        assert_eq!(
            annotation_patch(&pod(json!({})), Some("eu-west-1a")),
            Some(json!({"metadata": {"annotations": {"sextant.dev/zone": "eu-west-1a"}}}))
        );
        assert_eq!(annotation_patch(&pod(json!({ZONE_ANNOTATION: "eu-west-1a"})), Some("eu-west-1a")), None);
        assert_eq!(
            annotation_patch(&pod(json!({ZONE_ANNOTATION: "eu-west-1a"})), Some("eu-west-1b")),
            Some(json!({"metadata": {"annotations": {"sextant.dev/zone": "eu-west-1b"}}}))
        );
        // A Node that lost its label: the annotation goes, and the node has no zone.
        assert_eq!(
            annotation_patch(&pod(json!({ZONE_ANNOTATION: "eu-west-1a"})), None),
            Some(json!({"metadata": {"annotations": {"sextant.dev/zone": null}}}))
        );
        assert_eq!(annotation_patch(&pod(json!({"other": "x"})), None), None);
    }
}

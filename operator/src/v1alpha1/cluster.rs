use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ConfigMapVolumeSource, EmptyDirVolumeSource, EnvVar, LocalObjectReference, ResourceRequirements,
    SecretVolumeSource, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
pub use sextant_model::admin::MembershipState;

/// A Sextant installation: storage nodes (a StatefulSet) and routers (a Deployment).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sextant.dev",
    version = "v1alpha1",
    kind = "SextantCluster",
    namespaced,
    status = "SextantClusterStatus",
    derive = "PartialEq",
    shortname = "sxc",
    category = "sextant",
    doc = "A Sextant cluster: Raft storage nodes and stateless routers.",
    // Derived names (`NAME-node-N`, `data-NAME-node-N`, revision-hash labels) must stay within
    // the 63 characters of a label value.
    validation = Rule::new("size(self.metadata.name) <= 40").message("the cluster name is at most 40 characters"),
    scale(
        spec_replicas_path = ".spec.storage.nodes",
        status_replicas_path = ".status.storageNodes",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".spec.storage.nodes"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyNodes"),
    printcolumn(name = "Routers", type_ = "integer", json_path = ".status.readyRouters"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct SextantClusterSpec {
    /// Container image of `sextant` used by nodes and routers.
    #[serde(default = "default_image")]
    pub image: String,
    /// Pull policy of the node and router containers; absent: Kubernetes' default for the tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Secrets for pulling `image`, given to node and router pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(default)]
    pub routers: RouterSpec,
    pub storage: StorageSpec,
    /// TLS on the routers' public ports (HTTP and OTLP/gRPC): the Secret is mounted into router
    /// pods and reloaded when it changes. The internal port stays plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// Mutual TLS between routers and nodes and among nodes (internal gRPC).
    #[serde(default)]
    pub internal_tls: InternalTlsSpec,
    #[serde(default)]
    pub cluster_operation: ClusterOperation,
    #[serde(default)]
    pub network_policy: NetworkPolicySpec,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// Scheduling and additions for the pods of nodes or routers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Absent: spread over zones and over hosts (maxSkew 1, ScheduleAnyway each). `[]`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Added after the operator's own variables, whose names (`SEXTANT_*`) are refused here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub env: Vec<EnvVar>,
    /// Mounted into the container; `data` and `tmp` and the paths `/data` and `/tmp` are taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub volumes: Vec<ExtraVolume>,
}

/// A volume and where it is mounted. Exactly one of `secret`, `configMap`, `emptyDir`: the
/// volume types Pod Security "restricted" allows that need no cluster-specific driver.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtraVolume {
    pub name: String,
    pub mount_path: String,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
}

/// NetworkPolicies for node and router pods (docs/KUBERNETES.md, "Network policy").
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Namespaces whose pods may scrape metrics; absent or empty: the namespace named `monitoring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_namespace_selector: Option<LabelSelector>,
}

fn default_true() -> bool {
    true
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        Self { enabled: true, metrics_namespace_selector: None }
    }
}

pub fn default_image() -> String {
    format!("ghcr.io/sextant-dev/sextant:{}", env!("CARGO_PKG_VERSION"))
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterSpec {
    #[serde(default = "default_router_replicas")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: i32,
    #[serde(default)]
    pub service: RouterServiceSpec,
    /// Absent: requests of 200m CPU and 256Mi memory, a 1Gi memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default)]
    pub pod: PodTemplate,
}

fn default_router_replicas() -> i32 {
    2
}

impl Default for RouterSpec {
    fn default() -> Self {
        Self {
            replicas: default_router_replicas(),
            service: RouterServiceSpec::default(),
            resources: None,
            pod: PodTemplate::default(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterServiceSpec {
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Public HTTP API (JSON ingest, reads).
    #[serde(default = "default_http_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub http_port: i32,
    /// OTLP/gRPC (the routers listen on 4317; the Service maps this port onto it). OTLP/HTTP is
    /// served on `httpPort`.
    #[serde(default = "default_otlp_grpc_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub otlp_grpc_port: i32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

fn default_http_port() -> i32 {
    8080
}
fn default_otlp_grpc_port() -> i32 {
    4317
}

impl Default for RouterServiceSpec {
    fn default() -> Self {
        Self {
            type_: ServiceType::default(),
            http_port: default_http_port(),
            otlp_grpc_port: default_otlp_grpc_port(),
            annotations: BTreeMap::new(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

// Rules on the parent, not on the optional field: a field's own `self == oldSelf` is not
// evaluated when the field is added or removed, so it would let `storageClassName` appear later.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(STORAGE_CLASS_FIXED).message("storageClassName is immutable (it cannot be added or removed either)"),
    validation = Rule::new(VOLUME_SIZE_GROWS).message("volumeSize cannot shrink"),
)]
pub struct StorageSpec {
    /// Number of storage nodes. Editing it scales the cluster safely (scale subresource).
    #[schemars(range(min = 1, max = 1000))]
    pub nodes: i32,
    /// Data shards (Raft groups); fixed when the cluster is created.
    #[serde(default = "default_shards")]
    #[schemars(range(min = 1, max = 256))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("shards is immutable"))]
    pub shards: i32,
    /// Replicas of every shard; fixed when the cluster is created.
    #[serde(default = "default_replication_factor")]
    #[schemars(range(min = 1, max = 7))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("replicationFactor is immutable"))]
    pub replication_factor: i32,
    /// Size of each node's persistent volume. It can grow, never shrink: the operator expands
    /// every volume when the StorageClass allows it (`VolumeExpansion` condition).
    #[serde(default = "default_volume_size")]
    pub volume_size: Quantity,
    /// Fixed at creation, including whether it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Absent: requests of 500m CPU and 1Gi memory, a 4Gi memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default)]
    pub pod: PodTemplate,
    /// How long a scale-out waits for its new pods to be ready before it reports
    /// `Scaling=False` (reason `ScaleOutTimedOut`). It keeps waiting after that; setting `nodes`
    /// back to the size before cancels it.
    #[serde(default = "default_scale_out_timeout_seconds")]
    #[schemars(range(min = 1, max = 604800))]
    pub scale_out_timeout_seconds: i32,
    /// Nodes that lost their data or died (docs/KUBERNETES.md, "Replace or remove a node").
    #[serde(default)]
    pub failed_nodes: FailedNodes,
}

fn default_scale_out_timeout_seconds() -> i32 {
    600
}

/// Replacing nodes that restarted on an empty volume, removing dead ones. Both lists hold pod
/// ordinals (`NAME-node-N`); they are declarative: an entry whose work is done stays harmless.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedNodes {
    /// Replace every node that restarted on an empty volume under its old id, one at a time.
    /// `false`: only those listed in `replace`.
    #[serde(default = "default_true")]
    pub automatic_replacement: bool,
    /// Nodes to replace once they report an empty volume (with `automaticReplacement: false`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub replace: Vec<i32>,
    /// Nodes to take out of every group (their replicas move to the others) while their pod is
    /// not ready. A listed node gets no replicas; taken off the list, it gets them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub remove: Vec<i32>,
}

impl Default for FailedNodes {
    fn default() -> Self {
        Self { automatic_replacement: true, replace: vec![], remove: vec![] }
    }
}

/// Transition rule of `spec.storage`: `storageClassName` keeps its presence and its value.
pub const STORAGE_CLASS_FIXED: &str = "has(self.storageClassName) == has(oldSelf.storageClassName) && \
     (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)";
/// Transition rule of `spec.storage`: `volumeSize` (int or string) never decreases.
pub const VOLUME_SIZE_GROWS: &str =
    "quantity(string(self.volumeSize)).compareTo(quantity(string(oldSelf.volumeSize))) >= 0";

fn default_shards() -> i32 {
    4
}
fn default_replication_factor() -> i32 {
    3
}
fn default_volume_size() -> Quantity {
    Quantity("10Gi".into())
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// A `kubernetes.io/tls` Secret in the cluster's namespace (keys `tls.crt`, `tls.key`),
    /// e.g. one cert-manager renews.
    pub secret_name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InternalTlsSpec {
    /// The operator issues a cluster CA (Secret `NAME-internal-ca`, never mounted) and a
    /// certificate for nodes (`NAME-node-tls`) and one for routers (`NAME-router-tls`), or has
    /// cert-manager issue them (`certManager`), renews them before they expire, and nodes and
    /// routers refuse internal peers without one. Switched on a running cluster, the pods go
    /// there in three rolling restarts (`status.internalTlsMode`, docs/KUBERNETES.md, "TLS").
    #[serde(default)]
    pub enabled: bool,
    /// Have cert-manager issue the two certificates (Certificate resources the operator applies)
    /// instead of the operator. The issuer must put its CA in the Secrets' `ca.crt` (a CA or
    /// Vault issuer, not ACME).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<CertManagerSpec>,
}

/// The internal gRPC mode pods are rendered with (`sextant node --internal-tls-mode`, or no
/// mutual TLS at all).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InternalTlsMode {
    /// Plain text only.
    Off,
    /// Serve mutual TLS and plain text, dial plain text.
    Accept,
    /// Serve both, dial mutual TLS.
    Dial,
    /// Mutual TLS only.
    Require,
}

impl std::fmt::Display for InternalTlsMode {
    /// As in the status: `off`, `accept`, `dial`, `require`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InternalTlsMode::Off => "off",
            InternalTlsMode::Accept => "accept",
            InternalTlsMode::Dial => "dial",
            InternalTlsMode::Require => "require",
        })
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerSpec {
    pub issuer_ref: IssuerRef,
}

/// A cert-manager issuer, as a Certificate's `spec.issuerRef`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuerRef {
    pub name: String,
    /// `Issuer` (in the cluster's namespace) or `ClusterIssuer`, or an external issuer's kind.
    #[serde(default = "default_issuer_kind")]
    pub kind: String,
    #[serde(default = "default_issuer_group")]
    pub group: String,
}

fn default_issuer_kind() -> String {
    "Issuer".into()
}

fn default_issuer_group() -> String {
    "cert-manager.io".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOperation {
    /// Scale nodes and routers to zero, keeping volumes.
    #[serde(default)]
    pub stopped: bool,
    /// Leave every owned object as it is (for manual repairs).
    #[serde(default)]
    pub reconciliation_paused: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SextantClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,
    /// Replicas of the node StatefulSet right now (the scale subresource's status).
    #[serde(default)]
    pub storage_nodes: i32,
    #[serde(default)]
    pub ready_nodes: i32,
    #[serde(default)]
    pub ready_routers: i32,
    /// Label selector of node pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Membership of each storage node as reported by the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeMembership>,
    /// How the storage nodes and the groups' replicas spread over failure zones, as the
    /// cluster reports it (docs/KUBERNETES.md, "Zones").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<ZoneSpread>,
    /// A scaling operation in progress; every step is recorded here so a restart resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<ScalingOperation>,
    /// How node and router pods run internal gRPC now; it moves toward `spec.internalTls` one
    /// rolling restart at a time (`off`, `accept`, `dial`, `require`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_tls_mode: Option<InternalTlsMode>,
    /// Secret with the JWT signing key, cluster secret and admin token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// In-cluster URL of the router's HTTP API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_url: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneSpread {
    /// Distinct zones among the member nodes (nodes without a zone count as one).
    pub count: u32,
    /// Groups whose replicas break the zone rule: two in one zone although there are enough
    /// zones for one each (with fewer zones, a zone with more than its share).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub misplaced_groups: Vec<u64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClusterPhase {
    Pending,
    Running,
    Scaling,
    Blocked,
    Stopped,
    Paused,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMembership {
    pub ordinal: i32,
    pub pod: String,
    pub state: MembershipState,
    /// The failure zone the node registered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Set while the node's id waits for or undergoes replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<NodeReplacementProgress>,
}

/// A node that restarted on an empty volume, as the cluster reports it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeReplacementProgress {
    pub phase: ReplacementPhase,
    /// Groups whose leader has not yet removed the old incarnation (`Replacing`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups_left: Vec<u64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ReplacementPhase {
    /// Does not vote; waits for the operator (or `failedNodes.replace`) to replace it.
    NeedsReplacement,
    /// Each group removes the old incarnation, then adds the node back by snapshot.
    Replacing,
}

/// One in-flight change of `spec.storage.nodes`. Scale-in moves one node at a time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingOperation {
    pub from: i32,
    pub to: i32,
    pub step: ScalingStep,
    /// Ordinal of the node being removed (scale-in steps only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<i32>,
    /// When the operation started (the scale-out timeout counts from here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// A scale-out being undone: `from` is the grown size, `to` the size before it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ScalingStep {
    /// Scale-out: StatefulSet grown to `to`, waiting for its pods to be ready.
    GrowStatefulSet,
    /// Scale-out: the cluster places replicas on the new nodes and rebalances.
    PlaceReplicas,
    /// Scale-in: replicas are moved off `node`.
    Drain,
    /// Scale-in: StatefulSet shrunk by one, waiting for the pod of `node` to go.
    Shrink,
    /// Scale-in: deleting the volume of `node`.
    DeleteVolume,
}

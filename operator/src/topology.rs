//! The Kubernetes objects a `SextantCluster` owns, derived from its spec alone (plus the node
//! count the scaling plan allows right now). Pure: no API calls, no clock, no randomness.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapKeySelector, Container, ContainerPort, DownwardAPIVolumeFile,
    DownwardAPIVolumeSource, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource, SecurityContext, Service,
    ServiceAccount, ServicePort, ServiceSpec, TopologySpreadConstraint, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::internal_tls::Leaf;
use crate::v1alpha1::{InternalTlsMode, PodTemplate, SextantCluster, SextantClusterSpec};

/// Raft and storage gRPC port of a node.
pub const NODE_GRPC_PORT: i32 = 7000;
/// `/healthz`, `/readyz`, `/metrics` of a node.
pub const NODE_HTTP_PORT: i32 = 7001;
/// Ports the router container listens on (the Service maps the user's ports onto these).
pub const ROUTER_HTTP_PORT: i32 = 8080;
/// The router's `--internal-listen`: `/metrics` and the admin API, never on the public Service.
pub const ROUTER_INTERNAL_PORT: i32 = 9090;
/// The router's `--otlp-grpc-listen`: OTLP/gRPC (docs/API.md, "OTLP").
pub const ROUTER_OTLP_GRPC_PORT: i32 = 4317;
/// Where `spec.tls`'s Secret is mounted in router pods (`tls.crt`, `tls.key`).
pub const ROUTER_TLS_DIR: &str = "/etc/sextant/tls";

/// Keys of the cluster's internal Secret.
pub const JWT_SIGNING_KEY: &str = "jwt-signing-key";
pub const CLUSTER_SECRET: &str = "cluster-secret";
pub const ADMIN_TOKEN: &str = "admin-token";
pub const SECRET_KEYS: [&str; 3] = [JWT_SIGNING_KEY, CLUSTER_SECRET, ADMIN_TOKEN];

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("the SextantCluster has no {0}")]
    Missing(&'static str),
    #[error("the SextantCluster's {0}")]
    Invalid(&'static str),
    #[error("the SextantCluster's {component}.pod: {message}")]
    PodTemplate { component: &'static str, message: String },
    #[error("issuing the internal TLS certificates: {0}")]
    InternalTls(String),
}

/// Names of everything derived from one cluster, in one place so the planner, the controller
/// and the docs agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub cluster: String,
    pub namespace: String,
}

impl Names {
    pub fn of(cluster: &SextantCluster) -> Result<Self, TopologyError> {
        Ok(Self {
            cluster: cluster.metadata.name.clone().ok_or(TopologyError::Missing("metadata.name"))?,
            namespace: cluster.metadata.namespace.clone().ok_or(TopologyError::Missing("metadata.namespace"))?,
        })
    }
    pub fn nodes(&self) -> String {
        format!("{}-node", self.cluster)
    }
    pub fn routers(&self) -> String {
        format!("{}-router", self.cluster)
    }
    /// ClusterIP Service of the routers' internal port (metrics, admin API).
    pub fn routers_internal(&self) -> String {
        format!("{}-router-internal", self.cluster)
    }
    pub fn config(&self) -> String {
        format!("{}-config", self.cluster)
    }
    pub fn secret(&self) -> String {
        format!("{}-internal", self.cluster)
    }
    /// The internal TLS CA (`crate::internal_tls`); component certificates are `Leaf::secret`.
    pub fn internal_ca(&self) -> String {
        format!("{}-internal-ca", self.cluster)
    }
    pub fn pod(&self, ordinal: i32) -> String {
        format!("{}-node-{ordinal}", self.cluster)
    }
    /// PVC created by the StatefulSet's `data` volume claim template for one ordinal.
    pub fn volume(&self, ordinal: i32) -> String {
        format!("data-{}-node-{ordinal}", self.cluster)
    }
    /// Stable DNS name of a node through the headless Service.
    pub fn node_address(&self, ordinal: i32) -> String {
        format!("{}.{}.{}.svc:{NODE_GRPC_PORT}", self.pod(ordinal), self.nodes(), self.namespace)
    }
    /// Ordinal of a node from its address, for addresses of this cluster only.
    pub fn ordinal_of(&self, address: &str) -> Option<i32> {
        let host = address.split(':').next()?;
        let pod = host.strip_suffix(&format!(".{}.{}.svc", self.nodes(), self.namespace)).unwrap_or(host);
        pod.strip_prefix(&format!("{}-node-", self.cluster))?.parse().ok()
    }
    /// The public API; `https` when the routers serve TLS (`spec.tls`).
    pub fn router_url(&self, http_port: i32, tls: bool) -> String {
        format!("{}://{}.{}.svc:{http_port}", scheme(tls), self.routers(), self.namespace)
    }
    /// Where OTLP/gRPC exporters send, over TLS with `spec.tls`.
    pub fn router_otlp_grpc_url(&self, otlp_grpc_port: i32, tls: bool) -> String {
        format!("{}://{}.{}.svc:{otlp_grpc_port}", scheme(tls), self.routers(), self.namespace)
    }
    /// Where the operator reaches the admin API (and Prometheus the routers' metrics).
    pub fn router_internal_url(&self) -> String {
        format!("http://{}.{}.svc:{ROUTER_INTERNAL_PORT}", self.routers_internal(), self.namespace)
    }
    /// `--peers` of `sextant node`: Raft id = ordinal + 1 (ids start at 1).
    pub fn peers(&self, nodes: i32) -> String {
        (0..nodes).map(|i| format!("{}={}", i + 1, self.node_address(i))).collect::<Vec<_>>().join(",")
    }
    pub fn node_addresses(&self, nodes: i32) -> String {
        (0..nodes).map(|i| self.node_address(i)).collect::<Vec<_>>().join(",")
    }
}

/// Labels shared by every owned object; the `component` label tells nodes and routers apart.
pub fn labels(names: &Names, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "sextant".to_owned()),
        ("app.kubernetes.io/instance".to_owned(), names.cluster.clone()),
        ("app.kubernetes.io/component".to_owned(), component.to_owned()),
        ("app.kubernetes.io/managed-by".to_owned(), "sextant-operator".to_owned()),
    ])
}

fn selector(names: &Names, component: &str) -> BTreeMap<String, String> {
    let mut l = labels(names, component);
    l.remove("app.kubernetes.io/managed-by");
    l
}

/// `spec.selector` of the node pods as a label-selector string (for the scale subresource).
pub fn node_selector_string(names: &Names) -> String {
    selector(names, "node").iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// One object the cluster controller applies with server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub enum Owned {
    ConfigMap(ConfigMap),
    ServiceAccount(ServiceAccount),
    Service(Service),
    StatefulSet(StatefulSet),
    Deployment(Deployment),
    PodDisruptionBudget(PodDisruptionBudget),
    NetworkPolicy(NetworkPolicy),
}

impl Owned {
    pub fn name(&self) -> String {
        match self {
            Owned::ConfigMap(o) => o.name_any(),
            Owned::ServiceAccount(o) => o.name_any(),
            Owned::Service(o) => o.name_any(),
            Owned::StatefulSet(o) => o.name_any(),
            Owned::Deployment(o) => o.name_any(),
            Owned::PodDisruptionBudget(o) => o.name_any(),
            Owned::NetworkPolicy(o) => o.name_any(),
        }
    }
    pub fn kind(&self) -> &'static str {
        match self {
            Owned::ConfigMap(_) => "ConfigMap",
            Owned::ServiceAccount(_) => "ServiceAccount",
            Owned::Service(_) => "Service",
            Owned::StatefulSet(_) => "StatefulSet",
            Owned::Deployment(_) => "Deployment",
            Owned::PodDisruptionBudget(_) => "PodDisruptionBudget",
            Owned::NetworkPolicy(_) => "NetworkPolicy",
        }
    }
}

fn owner(cluster: &SextantCluster) -> Result<OwnerReference, TopologyError> {
    cluster.controller_owner_ref(&()).ok_or(TopologyError::Missing("metadata.uid"))
}

fn metadata(names: &Names, name: String, component: &str, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(names.namespace.clone()),
        labels: Some(labels(names, component)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

fn secret_env(env: &str, names: &Names, key: &str) -> EnvVar {
    let selector = SecretKeySelector { name: names.secret(), key: key.to_owned(), ..SecretKeySelector::default() };
    EnvVar {
        name: env.to_owned(),
        value_from: Some(EnvVarSource { secret_key_ref: Some(selector), ..EnvVarSource::default() }),
        ..EnvVar::default()
    }
}

fn config_env(env: &str, names: &Names, key: &str) -> EnvVar {
    let selector =
        ConfigMapKeySelector { name: names.config(), key: key.to_owned(), ..ConfigMapKeySelector::default() };
    EnvVar {
        name: env.to_owned(),
        value_from: Some(EnvVarSource { config_map_key_ref: Some(selector), ..EnvVarSource::default() }),
        ..EnvVar::default()
    }
}

fn value_env(env: &str, value: &str) -> EnvVar {
    EnvVar { name: env.to_owned(), value: Some(value.to_owned()), ..EnvVar::default() }
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort { name: Some(name.to_owned()), container_port: port, ..ContainerPort::default() }
}

fn service_port(name: &str, port: i32, target: IntOrString) -> ServicePort {
    ServicePort { name: Some(name.to_owned()), port, target_port: Some(target), ..ServicePort::default() }
}

/// An HTTP probe of `path` on the container port named `http`.
fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

/// A plain-HTTP probe on the named container port.
fn http_probe(port: &str, path: &str, period_seconds: i32, failure_threshold: Option<i32>) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(port.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period_seconds),
        failure_threshold,
        ..Probe::default()
    }
}

fn match_labels(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector { match_labels: Some(labels), ..LabelSelector::default() }
}

/// uid and gid the image's `sextant` user has.
const SEXTANT_UID: i64 = 10001;

/// Requests and limits of a node container whose spec gives none: 500m CPU and 1Gi memory
/// requested, memory limited to 4Gi (Burstable, never BestEffort; no CPU limit, no throttling).
pub fn default_node_resources() -> ResourceRequirements {
    resources("500m", "1Gi", "4Gi")
}

/// Requests and limits of a router container whose spec gives none: 200m CPU and 256Mi memory
/// requested, memory limited to 1Gi.
pub fn default_router_resources() -> ResourceRequirements {
    resources("200m", "256Mi", "1Gi")
}

fn resources(cpu: &str, memory: &str, memory_limit: &str) -> ResourceRequirements {
    let q = |s: &str| Quantity(s.to_owned());
    ResourceRequirements {
        requests: Some(BTreeMap::from([("cpu".to_owned(), q(cpu)), ("memory".to_owned(), q(memory))])),
        limits: Some(BTreeMap::from([("memory".to_owned(), q(memory_limit))])),
        ..ResourceRequirements::default()
    }
}

/// Pod Security "restricted": non-root with a fixed uid, the runtime's default seccomp profile.
fn restricted_pod_security(fs_group: Option<i64>) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(SEXTANT_UID),
        run_as_group: Some(SEXTANT_UID),
        fs_group,
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..SeccompProfile::default() }),
        ..PodSecurityContext::default()
    }
}

/// Pod Security "restricted" for a container, plus a read-only root file system (writes go to
/// the volumes: `/data` for nodes, the `tmp` emptyDir for both).
fn restricted_container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Capabilities::default() }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..SecurityContext::default()
    }
}

/// Volume and mount names and paths the operator's own containers use.
const RESERVED_VOLUMES: [&str; 3] = ["data", "tmp", ZONE_VOLUME];
const RESERVED_PATHS: [&str; 3] = ["/data", "/tmp", ZONE_DIR];

/// The node's zone reaches it as a downward-API file of the pod's zone annotation, which the
/// operator sets after the pod is scheduled (`crate::zones`); the kubelet updates the file.
const ZONE_VOLUME: &str = "sextant-zone";
const ZONE_DIR: &str = "/etc/sextant/zone";

fn zone_volume() -> (Volume, VolumeMount) {
    let field = format!("metadata.annotations['{}']", crate::zones::ZONE_ANNOTATION);
    (
        Volume {
            name: ZONE_VOLUME.into(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: "zone".into(),
                    field_ref: Some(ObjectFieldSelector { field_path: field, ..ObjectFieldSelector::default() }),
                    ..DownwardAPIVolumeFile::default()
                }]),
                ..DownwardAPIVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: ZONE_VOLUME.into(),
            mount_path: ZONE_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}

/// Spread pods of one component over zones, then over hosts. ScheduleAnyway: a cluster with one
/// zone or fewer hosts than pods still schedules them.
pub fn default_spread(selector: BTreeMap<String, String>) -> Vec<TopologySpreadConstraint> {
    ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
        .into_iter()
        .map(|key| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.to_owned(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(match_labels(selector.clone())),
            ..TopologySpreadConstraint::default()
        })
        .collect()
}

/// The two kinds of pods of a cluster.
#[derive(Clone, Copy)]
enum Component {
    Node,
    Router,
}

impl Component {
    /// Its `app.kubernetes.io/component` label.
    fn label(self) -> &'static str {
        match self {
            Component::Node => "node",
            Component::Router => "router",
        }
    }
    /// Where its settings are in the spec.
    fn field(self) -> &'static str {
        match self {
            Component::Node => "storage",
            Component::Router => "routers",
        }
    }
    fn template(self, spec: &SextantClusterSpec) -> &PodTemplate {
        match self {
            Component::Node => &spec.storage.pod,
            Component::Router => &spec.routers.pod,
        }
    }
    fn account(self, names: &Names) -> String {
        match self {
            Component::Node => names.nodes(),
            Component::Router => names.routers(),
        }
    }
}

/// The pod spec of one component: its container (already carrying the operator's env and
/// mounts), hardened, with the cluster's image settings and the component's [`PodTemplate`]
/// applied. User env and volumes come after the operator's; clashes are refused rather than
/// resolved, so nothing the operator relies on can be overridden by accident.
fn pod_spec(
    names: &Names,
    spec: &SextantClusterSpec,
    component: Component,
    mut container: Container,
    mut volumes: Vec<Volume>,
    pod_security: PodSecurityContext,
) -> Result<PodSpec, TopologyError> {
    let template = component.template(spec);
    let refuse = |message: String| TopologyError::PodTemplate { component: component.field(), message };
    let env = container.env.get_or_insert_with(Vec::new);
    let mut env_names: std::collections::BTreeSet<String> = env.iter().map(|e| e.name.clone()).collect();
    for var in &template.env {
        if var.name.starts_with("SEXTANT_") {
            return Err(refuse(format!("env {} is set by the operator", var.name)));
        }
        if !env_names.insert(var.name.clone()) {
            return Err(refuse(format!("env {} is given twice", var.name)));
        }
        env.push(var.clone());
    }
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    let mut volume_names: std::collections::BTreeSet<String> =
        RESERVED_VOLUMES.iter().map(|v| v.to_string()).chain(volumes.iter().map(|v| v.name.clone())).collect();
    for extra in &template.volumes {
        if !volume_names.insert(extra.name.clone()) {
            return Err(refuse(format!("volume name {} is taken", extra.name)));
        }
        let path = extra.mount_path.trim_end_matches('/');
        let taken = |p: &str| path == p || path.starts_with(&format!("{p}/"));
        if !extra.mount_path.starts_with('/') || path.is_empty() || RESERVED_PATHS.iter().any(|p| taken(p)) {
            return Err(refuse(format!("volume {} cannot be mounted at {}", extra.name, extra.mount_path)));
        }
        if mounts.iter().any(|m| m.mount_path.trim_end_matches('/') == path) {
            return Err(refuse(format!("two volumes are mounted at {}", extra.mount_path)));
        }
        let sources = [extra.secret.is_some(), extra.config_map.is_some(), extra.empty_dir.is_some()];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(refuse(format!("volume {} needs exactly one of secret, configMap, emptyDir", extra.name)));
        }
        volumes.push(Volume {
            name: extra.name.clone(),
            secret: extra.secret.clone(),
            config_map: extra.config_map.clone(),
            empty_dir: extra.empty_dir.clone(),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: extra.name.clone(),
            mount_path: extra.mount_path.clone(),
            read_only: extra.read_only.then_some(true),
            ..VolumeMount::default()
        });
    }
    container.image = Some(spec.image.clone());
    container.image_pull_policy = spec.image_pull_policy.map(|p| p.as_str().to_owned());
    container.security_context = Some(restricted_container_security());
    Ok(PodSpec {
        service_account_name: Some(component.account(names)),
        // Neither nodes nor routers talk to the Kubernetes API.
        automount_service_account_token: Some(false),
        security_context: Some(pod_security),
        image_pull_secrets: (!spec.image_pull_secrets.is_empty()).then(|| spec.image_pull_secrets.clone()),
        affinity: template.affinity.clone(),
        topology_spread_constraints: Some(
            template
                .topology_spread_constraints
                .clone()
                .unwrap_or_else(|| default_spread(selector(names, component.label()))),
        )
        .filter(|c| !c.is_empty()),
        tolerations: (!template.tolerations.is_empty()).then(|| template.tolerations.clone()),
        node_selector: (!template.node_selector.is_empty()).then(|| template.node_selector.clone()),
        priority_class_name: template.priority_class_name.clone(),
        containers: vec![container],
        volumes: Some(volumes),
        ..PodSpec::default()
    })
}

fn tmp_volume() -> (Volume, VolumeMount) {
    (
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("256Mi".into())),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount { name: "tmp".into(), mount_path: "/tmp".into(), ..VolumeMount::default() },
    )
}

/// A ServiceAccount without RBAC and without a mounted token, one per component.
fn service_account(names: &Names, name: String, component: &str, owner: &OwnerReference) -> ServiceAccount {
    ServiceAccount {
        metadata: metadata(names, name, component, owner),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

/// Labels of the operator's pods (the chart's `sextant.operatorSelector` without the release).
fn operator_pods() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "sextant".to_owned()),
        ("app.kubernetes.io/component".to_owned(), "operator".to_owned()),
    ])
}

fn namespace_named(namespace: &str) -> LabelSelector {
    match_labels(BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), namespace.to_owned())]))
}

fn tcp_ports(ports: &[i32]) -> Option<Vec<NetworkPolicyPort>> {
    Some(
        ports
            .iter()
            .map(|p| NetworkPolicyPort {
                port: Some(IntOrString::Int(*p)),
                protocol: Some("TCP".into()),
                ..NetworkPolicyPort::default()
            })
            .collect(),
    )
}

/// Ingress-only policies: routers' public ports from anywhere; node gRPC from routers, nodes and
/// the operator; internal and metrics ports from the operator and the metrics namespaces.
/// Egress is not restricted.
fn network_policies(
    cluster: &SextantCluster,
    names: &Names,
    owner: &OwnerReference,
    operator_namespace: &str,
) -> Vec<NetworkPolicy> {
    let same_namespace = |component: &str| NetworkPolicyPeer {
        pod_selector: Some(match_labels(selector(names, component))),
        ..NetworkPolicyPeer::default()
    };
    let operator = NetworkPolicyPeer {
        namespace_selector: Some(namespace_named(operator_namespace)),
        pod_selector: Some(match_labels(operator_pods())),
        ..NetworkPolicyPeer::default()
    };
    let metrics = NetworkPolicyPeer {
        namespace_selector: Some(
            // An empty selector would admit every namespace: it means the default here.
            cluster
                .spec
                .network_policy
                .metrics_namespace_selector
                .clone()
                .filter(|s| {
                    s.match_labels.iter().flatten().next().is_some()
                        || s.match_expressions.iter().flatten().next().is_some()
                })
                .unwrap_or_else(|| namespace_named("monitoring")),
        ),
        ..NetworkPolicyPeer::default()
    };
    let policy = |component: &str, name: String, ingress: Vec<NetworkPolicyIngressRule>| NetworkPolicy {
        metadata: metadata(names, name, component, owner),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(selector(names, component))),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(ingress),
            ..NetworkPolicySpec::default()
        }),
    };
    vec![
        policy(
            "node",
            names.nodes(),
            vec![
                NetworkPolicyIngressRule {
                    ports: tcp_ports(&[NODE_GRPC_PORT]),
                    from: Some(vec![same_namespace("router"), same_namespace("node"), operator.clone()]),
                },
                NetworkPolicyIngressRule {
                    ports: tcp_ports(&[NODE_HTTP_PORT]),
                    from: Some(vec![operator.clone(), metrics.clone()]),
                },
            ],
        ),
        policy(
            "router",
            names.routers(),
            vec![
                NetworkPolicyIngressRule { ports: tcp_ports(&[ROUTER_HTTP_PORT, ROUTER_OTLP_GRPC_PORT]), from: None },
                NetworkPolicyIngressRule {
                    ports: tcp_ports(&[ROUTER_INTERNAL_PORT]),
                    from: Some(vec![operator, metrics]),
                },
            ],
        ),
    ]
}

/// The internal Secret with freshly generated values. Created once; reconcile never rewrites it
/// (rotating the cluster secret or JWT key would cut every node off and log every user out).
pub fn internal_secret(
    cluster: &SextantCluster,
    mut generate: impl FnMut() -> String,
) -> Result<Secret, TopologyError> {
    let names = Names::of(cluster)?;
    Ok(Secret {
        metadata: metadata(&names, names.secret(), "secret", &owner(cluster)?),
        type_: Some("Opaque".into()),
        string_data: Some(SECRET_KEYS.iter().map(|k| ((*k).to_owned(), generate())).collect()),
        ..Secret::default()
    })
}

/// Everything applied for a cluster whose node StatefulSet should have `node_replicas` replicas
/// (decided by the scaling plan) and `member_nodes` members (the peers nodes start with).
/// `operator_namespace` is where the operator runs, admitted by the NetworkPolicies.
pub fn owned_objects(
    cluster: &SextantCluster,
    node_replicas: i32,
    member_nodes: i32,
    operator_namespace: &str,
) -> Result<Vec<Owned>, TopologyError> {
    let tls = crate::internal_tls::target_mode(cluster.spec.internal_tls.enabled);
    owned_objects_in(cluster, node_replicas, member_nodes, operator_namespace, tls)
}

/// [`owned_objects`] with pods running internal gRPC in `tls` (a step of a switch).
pub fn owned_objects_in(
    cluster: &SextantCluster,
    node_replicas: i32,
    member_nodes: i32,
    operator_namespace: &str,
    tls: InternalTlsMode,
) -> Result<Vec<Owned>, TopologyError> {
    let names = Names::of(cluster)?;
    let owner = owner(cluster)?;
    let spec = &cluster.spec;
    if spec.routers.service.http_port == spec.routers.service.otlp_grpc_port {
        return Err(TopologyError::Invalid("routers.service httpPort and otlpGrpcPort must differ"));
    }
    let stopped = spec.cluster_operation.stopped;
    let storage = &spec.storage;

    let config = ConfigMap {
        metadata: metadata(&names, names.config(), "config", &owner),
        data: Some(BTreeMap::from([
            ("peers".to_owned(), names.peers(member_nodes)),
            ("nodes".to_owned(), names.node_addresses(member_nodes)),
            ("shards".to_owned(), storage.shards.to_string()),
            ("replication-factor".to_owned(), storage.replication_factor.to_string()),
        ])),
        ..ConfigMap::default()
    };

    let headless = Service {
        metadata: metadata(&names, names.nodes(), "node", &owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // Raft peers must resolve each other before they are ready, or a new cluster
            // never elects its first leader.
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(&names, "node")),
            ports: Some(vec![
                service_port("grpc", NODE_GRPC_PORT, IntOrString::Int(NODE_GRPC_PORT)),
                service_port("http", NODE_HTTP_PORT, IntOrString::Int(NODE_HTTP_PORT)),
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };

    // The Raft id is the pod ordinal + 1, taken from the stable hostname (`NAME-node-N`).
    let node_script = "exec sextant node --id $(( ${HOSTNAME##*-} + 1 )) \
        --listen 0.0.0.0:7000 --http-listen 0.0.0.0:7001 --data-dir /data \
        --peers \"$SEXTANT_PEERS\" --shards \"$SEXTANT_SHARDS\" \
        --replication-factor \"$SEXTANT_REPLICATION_FACTOR\"";
    let (tmp, tmp_mount) = tmp_volume();
    let (zone, zone_mount) = zone_volume();
    let node_container = Container {
        name: "node".into(),
        command: Some(vec!["/bin/sh".into(), "-c".into(), node_script.into()]),
        env: Some(vec![
            config_env("SEXTANT_PEERS", &names, "peers"),
            config_env("SEXTANT_SHARDS", &names, "shards"),
            config_env("SEXTANT_REPLICATION_FACTOR", &names, "replication-factor"),
            secret_env("SEXTANT_CLUSTER_SECRET", &names, CLUSTER_SECRET),
            value_env("SEXTANT_LOG_FORMAT", "json"),
            value_env("SEXTANT_ZONE_FILE", &format!("{ZONE_DIR}/zone")),
        ]),
        ports: Some(vec![container_port("grpc", NODE_GRPC_PORT), container_port("http", NODE_HTTP_PORT)]),
        readiness_probe: Some(http_probe("http", "/readyz", 5, None)),
        liveness_probe: Some(http_probe("http", "/healthz", 10, Some(6))),
        volume_mounts: Some(vec![
            VolumeMount { name: "data".into(), mount_path: "/data".into(), ..VolumeMount::default() },
            tmp_mount.clone(),
            zone_mount,
        ]),
        resources: Some(storage.resources.clone().unwrap_or_else(default_node_resources)),
        ..Container::default()
    };
    let mut node_pod = pod_spec(
        &names,
        spec,
        Component::Node,
        node_container,
        vec![tmp.clone(), zone],
        // fsGroup makes the fresh volume writable by the image's user.
        restricted_pod_security(Some(SEXTANT_UID)),
    )?;
    node_pod.termination_grace_period_seconds = Some(60);
    if tls != InternalTlsMode::Off {
        crate::internal_tls::mount(&mut node_pod, Leaf::Node.secret(&names), Component::Node.field(), tls)?;
    }
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            labels: Some(selector(&names, "node")),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), storage.volume_size.clone())])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: storage.storage_class_name.clone(),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    };
    let statefulset = StatefulSet {
        metadata: metadata(&names, names.nodes(), "node", &owner),
        spec: Some(StatefulSetSpec {
            service_name: Some(names.nodes()),
            replicas: Some(if stopped { 0 } else { node_replicas }),
            // All initial members must run together to elect the first leaders.
            pod_management_policy: Some("Parallel".into()),
            // Volumes are deleted by the operator after a node is drained, never implicitly.
            persistent_volume_claim_retention_policy: Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_deleted: Some("Retain".into()),
                when_scaled: Some("Retain".into()),
            }),
            selector: match_labels(selector(&names, "node")),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels(&names, "node")), ..ObjectMeta::default() }),
                spec: Some(node_pod),
            },
            volume_claim_templates: Some(vec![claim]),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    };

    let router_env = vec![
        config_env("SEXTANT_NODES", &names, "nodes"),
        secret_env("SEXTANT_CLUSTER_SECRET", &names, CLUSTER_SECRET),
        secret_env("SEXTANT_JWT_SECRET", &names, JWT_SIGNING_KEY),
        secret_env("SEXTANT_ADMIN_TOKEN", &names, ADMIN_TOKEN),
        value_env("SEXTANT_LOG_FORMAT", "json"),
    ];
    let mut router_args: Vec<String> = vec![
        "router".into(),
        "--listen".into(),
        format!("0.0.0.0:{ROUTER_HTTP_PORT}"),
        "--internal-listen".into(),
        format!("0.0.0.0:{ROUTER_INTERNAL_PORT}"),
        "--otlp-grpc-listen".into(),
        format!("0.0.0.0:{ROUTER_OTLP_GRPC_PORT}"),
        "--nodes".into(),
        "$(SEXTANT_NODES)".into(),
    ];
    let mut router_volumes = vec![tmp];
    let mut router_mounts = vec![tmp_mount];
    // The kubelet updates a mounted Secret in place; the router reloads the files.
    if let Some(tls) = &spec.tls {
        if tls.secret_name.is_empty() {
            return Err(TopologyError::Invalid("tls.secretName is empty"));
        }
        router_args.extend([
            "--tls-cert".into(),
            format!("{ROUTER_TLS_DIR}/tls.crt"),
            "--tls-key".into(),
            format!("{ROUTER_TLS_DIR}/tls.key"),
        ]);
        router_volumes.push(Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(tls.secret_name.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        router_mounts.push(VolumeMount {
            name: "tls".into(),
            mount_path: ROUTER_TLS_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    let router_container = Container {
        name: "router".into(),
        args: Some(router_args),
        env: Some(router_env),
        ports: Some(vec![
            container_port("http", ROUTER_HTTP_PORT),
            container_port("internal", ROUTER_INTERNAL_PORT),
            container_port("otlp-grpc", ROUTER_OTLP_GRPC_PORT),
        ]),
        // On the internal port: plain HTTP whether or not the public one serves TLS.
        readiness_probe: Some(http_probe("internal", "/readyz", 5, None)),
        liveness_probe: Some(http_probe("internal", "/healthz", 10, None)),
        volume_mounts: Some(router_mounts),
        resources: Some(spec.routers.resources.clone().unwrap_or_else(default_router_resources)),
        ..Container::default()
    };
    let mut router_pod =
        pod_spec(&names, spec, Component::Router, router_container, router_volumes, restricted_pod_security(None))?;
    if tls != InternalTlsMode::Off {
        crate::internal_tls::mount(&mut router_pod, Leaf::Router.secret(&names), Component::Router.field(), tls)?;
    }
    let deployment = Deployment {
        metadata: metadata(&names, names.routers(), "router", &owner),
        spec: Some(DeploymentSpec {
            replicas: Some(if stopped { 0 } else { spec.routers.replicas }),
            selector: match_labels(selector(&names, "router")),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels(&names, "router")), ..ObjectMeta::default() }),
                spec: Some(router_pod),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };

    let service_spec = &spec.routers.service;
    let router_service = Service {
        metadata: ObjectMeta {
            annotations: Some(service_spec.annotations.clone()),
            ..metadata(&names, names.routers(), "router", &owner)
        },
        spec: Some(ServiceSpec {
            type_: Some(service_spec.type_.as_str().into()),
            selector: Some(selector(&names, "router")),
            ports: Some(vec![
                service_port("http", service_spec.http_port, IntOrString::String("http".into())),
                ServicePort {
                    app_protocol: Some("grpc".into()),
                    ..service_port("otlp-grpc", service_spec.otlp_grpc_port, IntOrString::String("otlp-grpc".into()))
                },
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };

    // Always ClusterIP, whatever type the public Service has. The annotations let a Prometheus
    // with the usual `kubernetes-service-endpoints` job scrape every router pod.
    let internal_service = Service {
        metadata: ObjectMeta {
            annotations: Some(BTreeMap::from([
                ("prometheus.io/scrape".to_owned(), "true".to_owned()),
                ("prometheus.io/port".to_owned(), ROUTER_INTERNAL_PORT.to_string()),
                ("prometheus.io/path".to_owned(), "/metrics".to_owned()),
            ])),
            ..metadata(&names, names.routers_internal(), "router", &owner)
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector(&names, "router")),
            ports: Some(vec![service_port("internal", ROUTER_INTERNAL_PORT, IntOrString::String("internal".into()))]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };

    // One voluntary disruption at a time keeps a majority of every group with rf >= 3; with
    // rf 5, two. rf 1 or 2 cannot survive any loss, but blocking every drain would be worse.
    let max_unavailable = ((storage.replication_factor - 1) / 2).max(1);
    let pdb = PodDisruptionBudget {
        metadata: metadata(&names, names.nodes(), "node", &owner),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(max_unavailable)),
            selector: Some(match_labels(selector(&names, "node"))),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    };

    let mut objects = vec![
        Owned::ConfigMap(config),
        // Before the workloads: a pod naming a missing ServiceAccount is not created.
        Owned::ServiceAccount(service_account(&names, names.nodes(), "node", &owner)),
        Owned::ServiceAccount(service_account(&names, names.routers(), "router", &owner)),
        Owned::Service(headless),
        Owned::StatefulSet(statefulset),
        Owned::Deployment(deployment),
        Owned::Service(router_service),
        Owned::Service(internal_service),
        Owned::PodDisruptionBudget(pdb),
    ];
    if spec.network_policy.enabled {
        objects.extend(
            network_policies(cluster, &names, &owner, operator_namespace).into_iter().map(Owned::NetworkPolicy),
        );
    }
    Ok(objects)
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::v1alpha1::SextantClusterSpec;

    pub const OPERATOR_NS: &str = "sextant-system";

    pub fn cluster(nodes: i32, rf: i32) -> SextantCluster {
        let spec: SextantClusterSpec =
            serde_json::from_value(json!({"storage": {"nodes": nodes, "replicationFactor": rf}})).unwrap();
        let mut c = SextantCluster::new("obs", spec);
        c.metadata.namespace = Some("telemetry".into());
        c.metadata.uid = Some("9b2e6f9e-0000-4000-8000-000000000001".into());
        c.metadata.generation = Some(1);
        c
    }

    fn statefulset(objects: &[Owned]) -> &StatefulSet {
        objects
            .iter()
            .find_map(|o| match o {
                Owned::StatefulSet(s) => Some(s),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn peers_use_stable_dns_names_and_ids_from_one() {
        let names = Names::of(&cluster(3, 3)).unwrap();
        assert_eq!(names.peers(2), "1=obs-node-0.obs-node.telemetry.svc:7000,2=obs-node-1.obs-node.telemetry.svc:7000");
        assert_eq!(names.ordinal_of("obs-node-12.obs-node.telemetry.svc:7000"), Some(12));
        assert_eq!(names.ordinal_of("other-node-1.other-node.telemetry.svc:7000"), None);
    }

    #[test]
    fn every_object_is_owned_by_the_cluster_and_in_its_namespace() {
        let objects = owned_objects(&cluster(3, 3), 3, 3, OPERATOR_NS).unwrap();
        assert_eq!(objects.len(), 11);
        for o in &objects {
            let meta = match o {
                Owned::ConfigMap(x) => &x.metadata,
                Owned::ServiceAccount(x) => &x.metadata,
                Owned::Service(x) => &x.metadata,
                Owned::StatefulSet(x) => &x.metadata,
                Owned::Deployment(x) => &x.metadata,
                Owned::PodDisruptionBudget(x) => &x.metadata,
                Owned::NetworkPolicy(x) => &x.metadata,
            };
            assert_eq!(meta.namespace.as_deref(), Some("telemetry"), "{}", o.name());
            let owners = meta.owner_references.as_ref().unwrap();
            assert_eq!(owners[0].kind, "SextantCluster");
            assert_eq!(owners[0].controller, Some(true));
        }
    }

    #[test]
    fn statefulset_replicas_follow_the_scaling_plan_and_stop() {
        let c = cluster(5, 3);
        let sts = statefulset(&owned_objects(&c, 4, 4, OPERATOR_NS).unwrap()).clone();
        let spec = sts.spec.unwrap();
        assert_eq!(spec.replicas, Some(4));
        assert_eq!(spec.service_name.as_deref(), Some("obs-node"));
        let claim = &spec.volume_claim_templates.unwrap()[0];
        assert_eq!(claim.metadata.name.as_deref(), Some("data"));

        let mut stopped = c.clone();
        stopped.spec.cluster_operation.stopped = true;
        let objects = owned_objects(&stopped, 4, 4, OPERATOR_NS).unwrap();
        assert_eq!(statefulset(&objects).spec.as_ref().unwrap().replicas, Some(0));
        let routers = objects.iter().find_map(|o| if let Owned::Deployment(d) = o { Some(d) } else { None }).unwrap();
        assert_eq!(routers.spec.as_ref().unwrap().replicas, Some(0));
    }

    fn service<'a>(objects: &'a [Owned], name: &str) -> &'a Service {
        objects
            .iter()
            .find_map(|o| match o {
                Owned::Service(s) if s.metadata.name.as_deref() == Some(name) => Some(s),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no Service {name}"))
    }

    fn router_container(objects: &[Owned]) -> k8s_openapi::api::core::v1::Container {
        let d = objects.iter().find_map(|o| if let Owned::Deployment(d) = o { Some(d) } else { None }).unwrap();
        d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].clone()
    }

    /// (name, port, target port) of each port of a Service.
    fn service_ports(svc: &Service) -> Vec<(String, i32, String)> {
        let target = |t: &Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>| match t {
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s)) => s.clone(),
            other => format!("{other:?}"),
        };
        svc.spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| (p.name.clone().unwrap_or_default(), p.port, target(&p.target_port)))
            .collect()
    }

    #[test]
    fn router_service_exposes_http_and_otlp_grpc_but_not_the_internal_port() {
        let mut c = cluster(3, 3);
        c.spec.routers.service.otlp_grpc_port = 14317;
        let objects = owned_objects(&c, 3, 3, OPERATOR_NS).unwrap();
        let ports = service_ports(service(&objects, "obs-router"));
        assert_eq!(ports, vec![("http".into(), 8080, "http".into()), ("otlp-grpc".into(), 14317, "otlp-grpc".into())]);
        let router = router_container(&objects);
        let args = router.args.unwrap();
        let at = args.iter().position(|a| a == "--otlp-grpc-listen").expect("--otlp-grpc-listen");
        assert_eq!(args[at + 1], "0.0.0.0:4317");
        let container_ports: Vec<(Option<String>, i32)> =
            router.ports.unwrap().into_iter().map(|p| (p.name, p.container_port)).collect();
        assert!(container_ports.contains(&(Some("otlp-grpc".into()), 4317)), "{container_ports:?}");
    }

    #[test]
    fn spec_tls_mounts_the_secret_and_passes_the_tls_flags() {
        let mut c = cluster(3, 3);
        let plain = router_container(&owned_objects(&c, 3, 3, OPERATOR_NS).unwrap());
        assert!(!plain.args.unwrap().iter().any(|a| a.starts_with("--tls")));
        c.spec.tls = Some(crate::v1alpha1::TlsSpec { secret_name: "obs-tls".into() });
        let objects = owned_objects(&c, 3, 3, OPERATOR_NS).unwrap();
        let router = router_container(&objects);
        let args = router.args.clone().unwrap();
        let flag = |name: &str| args[args.iter().position(|a| a == name).expect(name) + 1].clone();
        assert_eq!(flag("--tls-cert"), "/etc/sextant/tls/tls.crt");
        assert_eq!(flag("--tls-key"), "/etc/sextant/tls/tls.key");
        let mount = router.volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "tls").expect("tls mount");
        assert_eq!((mount.mount_path.as_str(), mount.read_only), (ROUTER_TLS_DIR, Some(true)));
        let d = objects.iter().find_map(|o| if let Owned::Deployment(d) = o { Some(d) } else { None }).unwrap();
        let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "tls").expect("tls volume");
        assert_eq!(volume.secret.as_ref().unwrap().secret_name.as_deref(), Some("obs-tls"));
        // Probes stay plain HTTP, on the internal port.
        for probe in [router.readiness_probe.unwrap(), router.liveness_probe.unwrap()] {
            let get = probe.http_get.unwrap();
            assert_eq!(get.port, IntOrString::String("internal".into()));
            assert_eq!(get.scheme, None);
        }
        // A user volume cannot take the name.
        c.spec.routers.pod.volumes = serde_json::from_value(json!([
            {"name": "tls", "mountPath": "/etc/other", "secret": {"secretName": "x"}}
        ]))
        .unwrap();
        assert!(matches!(owned_objects(&c, 3, 3, OPERATOR_NS), Err(TopologyError::PodTemplate { .. })));
        c.spec.routers.pod.volumes.clear();
        c.spec.tls = Some(crate::v1alpha1::TlsSpec { secret_name: String::new() });
        assert!(matches!(owned_objects(&c, 3, 3, OPERATOR_NS), Err(TopologyError::Invalid(_))));
    }

    #[test]
    fn one_port_for_http_and_otlp_grpc_is_refused() {
        let mut c = cluster(3, 3);
        c.spec.routers.service.otlp_grpc_port = c.spec.routers.service.http_port;
        assert!(matches!(owned_objects(&c, 3, 3, OPERATOR_NS), Err(TopologyError::Invalid(_))));
    }

    #[test]
    fn routers_serve_metrics_and_admin_on_an_internal_cluster_ip_service() {
        let mut c = cluster(3, 3);
        c.spec.routers.service.type_ = crate::v1alpha1::ServiceType::LoadBalancer;
        let objects = owned_objects(&c, 3, 3, OPERATOR_NS).unwrap();
        let router = router_container(&objects);
        let args = router.args.unwrap();
        let at = args.iter().position(|a| a == "--internal-listen").expect("--internal-listen");
        assert_eq!(args[at + 1], "0.0.0.0:9090");
        let ports: Vec<(Option<String>, i32)> =
            router.ports.unwrap().into_iter().map(|p| (p.name, p.container_port)).collect();
        assert!(ports.contains(&(Some("internal".into()), 9090)), "{ports:?}");

        let internal = service(&objects, "obs-router-internal");
        let spec = internal.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"), "internal even when the public one is a LoadBalancer");
        assert_eq!(spec.selector, service(&objects, "obs-router").spec.as_ref().unwrap().selector);
        assert_eq!(service_ports(internal), vec![("internal".into(), 9090, "internal".into())]);
        let annotations = internal.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["prometheus.io/port"], "9090");
        assert_eq!(annotations["prometheus.io/path"], "/metrics");
        let names = Names::of(&c).unwrap();
        assert_eq!(names.router_internal_url(), "http://obs-router-internal.telemetry.svc:9090");
    }

    #[test]
    fn internal_secret_holds_every_key_and_generates_each_once() {
        let mut n = 0;
        let s = internal_secret(&cluster(3, 3), || {
            n += 1;
            format!("v{n}")
        })
        .unwrap();
        let data = s.string_data.unwrap();
        assert_eq!(data.len(), 3);
        assert_eq!(n, 3);
        assert!(SECRET_KEYS.iter().all(|k| data.contains_key(*k)));
    }

    /// Every object of a cluster that sets every optional field and of a minimal one, as the API
    /// server receives them;
    /// `SEXTANT_UPDATE_GOLDEN=1` rewrites the file after an intended change.
    #[test]
    fn owned_objects_serialize_as_committed() {
        let mut c = cluster(5, 3);
        c.spec = serde_json::from_value(json!({
            "image": "ghcr.io/sextant-dev/sextant:0.1.0",
            "imagePullPolicy": "Always",
            "imagePullSecrets": [{"name": "registry"}],
            "routers": {"replicas": 3, "service": {"type": "LoadBalancer", "httpPort": 80,
                        "annotations": {"example.com/lb": "internal"}},
                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                        "pod": {"topologySpreadConstraints": [], "priorityClassName": "high",
                                "env": [{"name": "RUST_BACKTRACE", "value": "1"}]}},
            "storage": {"nodes": 5, "shards": 8, "replicationFactor": 5, "volumeSize": "50Gi",
                        "storageClassName": "fast", "resources": {"limits": {"memory": "4Gi"}},
                        "pod": {"nodeSelector": {"disk": "ssd"},
                                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "sextant", "effect": "NoSchedule"}],
                                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
                                "volumes": [{"name": "ca", "mountPath": "/etc/sextant/ca", "readOnly": true,
                                             "secret": {"secretName": "obs-ca"}}]}},
            "tls": {"secretName": "obs-tls"},
            "networkPolicy": {"metricsNamespaceSelector": {"matchLabels": {"team": "observability"}}},
        }))
        .unwrap();
        let mut n = 0;
        let secret = internal_secret(&c, || {
            n += 1;
            format!("v{n}")
        })
        .unwrap();
        let mut out = vec![serde_json::to_value(&secret).unwrap()];
        let objects = owned_objects(&c, 4, 3, OPERATOR_NS)
            .unwrap()
            .into_iter()
            .chain(owned_objects(&cluster(3, 3), 3, 3, OPERATOR_NS).unwrap());
        for o in objects {
            out.push(
                match o {
                    Owned::ConfigMap(x) => serde_json::to_value(x),
                    Owned::ServiceAccount(x) => serde_json::to_value(x),
                    Owned::NetworkPolicy(x) => serde_json::to_value(x),
                    Owned::Service(x) => serde_json::to_value(x),
                    Owned::StatefulSet(x) => serde_json::to_value(x),
                    Owned::Deployment(x) => serde_json::to_value(x),
                    Owned::PodDisruptionBudget(x) => serde_json::to_value(x),
                }
                .unwrap(),
            );
        }
        let generated = serde_json::to_string_pretty(&out).unwrap() + "\n";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/testdata/owned_objects.json");
        if std::env::var_os("SEXTANT_UPDATE_GOLDEN").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        assert_eq!(generated, std::fs::read_to_string(path).unwrap_or_default());
    }

    fn pods(objects: &[Owned]) -> (PodSpec, PodSpec) {
        let node = statefulset(objects).spec.as_ref().unwrap().template.spec.clone().unwrap();
        let d = objects.iter().find_map(|o| if let Owned::Deployment(d) = o { Some(d) } else { None }).unwrap();
        (node, d.spec.as_ref().unwrap().template.spec.clone().unwrap())
    }

    fn with_spec(patch: serde_json::Value) -> SextantCluster {
        let mut c = cluster(3, 3);
        let mut spec = serde_json::to_value(&c.spec).unwrap();
        json_patch_merge(&mut spec, patch);
        c.spec = serde_json::from_value(spec).unwrap();
        c
    }

    fn json_patch_merge(target: &mut serde_json::Value, patch: serde_json::Value) {
        match (target, patch) {
            (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    json_patch_merge(t.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (t, p) => *t = p,
        }
    }

    #[test]
    fn pods_without_settings_get_default_resources_and_spread_over_zones_then_hosts() {
        let (node, router) = pods(&owned_objects(&cluster(3, 3), 3, 3, OPERATOR_NS).unwrap());
        assert_eq!(node.containers[0].resources, Some(default_node_resources()));
        assert_eq!(router.containers[0].resources, Some(default_router_resources()));
        for (pod, component) in [(&node, "node"), (&router, "router")] {
            let requests = pod.containers[0].resources.as_ref().unwrap().requests.as_ref().unwrap();
            assert!(requests.contains_key("cpu") && requests.contains_key("memory"), "not BestEffort");
            let spread = pod.topology_spread_constraints.as_ref().unwrap();
            let keys: Vec<&str> = spread.iter().map(|c| c.topology_key.as_str()).collect();
            assert_eq!(keys, ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]);
            for c in spread {
                assert_eq!((c.max_skew, c.when_unsatisfiable.as_str()), (1, "ScheduleAnyway"));
                let names = Names::of(&cluster(3, 3)).unwrap();
                assert_eq!(c.label_selector, Some(match_labels(selector(&names, component))));
            }
            assert_eq!(pod.image_pull_secrets, None);
            assert_eq!(pod.containers[0].image_pull_policy, None);
        }
    }

    #[test]
    fn explicit_resources_replace_the_defaults_whole() {
        let c =
            with_spec(json!({"storage": {"resources": {"limits": {"memory": "8Gi"}}}, "routers": {"resources": {}}}));
        let (node, router) = pods(&owned_objects(&c, 3, 3, OPERATOR_NS).unwrap());
        let node_resources = node.containers[0].resources.clone().unwrap();
        assert_eq!(node_resources.requests, None);
        assert_eq!(node_resources.limits.unwrap()["memory"], Quantity("8Gi".into()));
        // `{}` is an explicit choice of no requests (BestEffort), not a missing value.
        assert_eq!(router.containers[0].resources, Some(ResourceRequirements::default()));
    }

    #[test]
    fn pod_template_settings_reach_only_their_component() {
        let c = with_spec(json!({
            "imagePullPolicy": "Always",
            "imagePullSecrets": [{"name": "registry"}],
            "storage": {"pod": {
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                "priorityClassName": "storage-critical",
                "topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}},
                "env": [{"name": "RUST_LOG", "value": "debug"}],
                "volumes": [{"name": "ca", "mountPath": "/etc/ca", "readOnly": true, "secret": {"secretName": "ca"}}],
            }},
            "routers": {"pod": {"topologySpreadConstraints": []}},
        }));
        let (node, router) = pods(&owned_objects(&c, 3, 3, OPERATOR_NS).unwrap());
        for pod in [&node, &router] {
            assert_eq!(pod.containers[0].image_pull_policy.as_deref(), Some("Always"));
            assert_eq!(pod.image_pull_secrets.as_ref().unwrap()[0].name, "registry");
        }
        assert_eq!(node.node_selector.as_ref().unwrap()["disk"], "ssd");
        assert_eq!(node.tolerations.as_ref().unwrap()[0].key.as_deref(), Some("dedicated"));
        assert_eq!(node.priority_class_name.as_deref(), Some("storage-critical"));
        assert!(node.affinity.as_ref().unwrap().pod_anti_affinity.is_some());
        let spread = node.topology_spread_constraints.as_ref().unwrap();
        assert_eq!(
            (spread.len(), spread[0].topology_key.as_str()),
            (1, "rack"),
            "given constraints replace the default"
        );
        let env: Vec<&str> = node.containers[0].env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(env.last(), Some(&"RUST_LOG"));
        let ca = node.volumes.as_ref().unwrap().iter().find(|v| v.name == "ca").unwrap();
        assert_eq!(ca.secret.as_ref().unwrap().secret_name.as_deref(), Some("ca"));
        let mount = node.containers[0].volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "ca").unwrap();
        assert_eq!((mount.mount_path.as_str(), mount.read_only), ("/etc/ca", Some(true)));

        assert_eq!(router.topology_spread_constraints, None, "[] turns spreading off");
        assert_eq!((router.node_selector.as_ref(), router.tolerations.as_ref()), (None, None));
        assert_eq!(router.priority_class_name, None);
        assert!(!router.containers[0].env.as_ref().unwrap().iter().any(|e| e.name == "RUST_LOG"));
    }

    #[test]
    fn pods_run_hardened_under_their_own_token_less_service_accounts() {
        let objects = owned_objects(&cluster(3, 3), 3, 3, OPERATOR_NS).unwrap();
        let (node, router) = pods(&objects);
        let accounts: Vec<&ServiceAccount> =
            objects.iter().filter_map(|o| if let Owned::ServiceAccount(a) = o { Some(a) } else { None }).collect();
        let names: Vec<String> = accounts.iter().map(|a| a.name_any()).collect();
        assert_eq!(names, ["obs-node", "obs-router"]);
        assert!(accounts.iter().all(|a| a.automount_service_account_token == Some(false)));
        for (pod, account) in [(&node, "obs-node"), (&router, "obs-router")] {
            assert_eq!(pod.service_account_name.as_deref(), Some(account));
            assert_eq!(pod.automount_service_account_token, Some(false));
            let sc = pod.containers[0].security_context.as_ref().unwrap();
            assert_eq!(sc.read_only_root_filesystem, Some(true));
            let tmp = pod.containers[0].volume_mounts.as_ref().unwrap().iter().find(|m| m.mount_path == "/tmp");
            assert!(tmp.is_some(), "a writable /tmp under a read-only root");
        }
        assert_eq!(node.security_context.as_ref().unwrap().fs_group, Some(10001));
    }

    #[test]
    fn node_pods_read_their_zone_from_a_downward_api_file_of_the_zone_annotation() {
        let objects = owned_objects(&cluster(3, 3), 3, 3, OPERATOR_NS).unwrap();
        let (node, router) = pods(&objects);
        let volume = node.volumes.as_ref().unwrap().iter().find(|v| v.name == ZONE_VOLUME).unwrap();
        let item = &volume.downward_api.as_ref().unwrap().items.as_ref().unwrap()[0];
        assert_eq!(item.field_ref.as_ref().unwrap().field_path, "metadata.annotations['sextant.dev/zone']");
        let container = &node.containers[0];
        let mount = container.volume_mounts.as_ref().unwrap().iter().find(|m| m.name == ZONE_VOLUME).unwrap();
        assert_eq!((mount.mount_path.as_str(), mount.read_only), (ZONE_DIR, Some(true)));
        let env = container.env.as_ref().unwrap().iter().find(|e| e.name == "SEXTANT_ZONE_FILE").unwrap();
        assert_eq!(env.value.as_deref(), Some("/etc/sextant/zone/zone"));
        assert!(router.volumes.as_ref().unwrap().iter().all(|v| v.name != ZONE_VOLUME), "routers have no zone");
        for patch in [
            json!({"storage": {"pod": {"volumes": [{"name": "sextant-zone", "mountPath": "/x", "emptyDir": {}}]}}}),
            json!({"storage": {"pod": {"volumes": [{"name": "x", "mountPath": "/etc/sextant/zone/x", "emptyDir": {}}]}}}),
        ] {
            let result = owned_objects(&with_spec(patch.clone()), 3, 3, OPERATOR_NS);
            assert!(matches!(result, Err(TopologyError::PodTemplate { .. })), "{patch} was accepted");
        }
    }

    #[test]
    fn clashing_env_and_volumes_are_refused() {
        let refused = [
            json!({"storage": {"pod": {"env": [{"name": "SEXTANT_PEERS", "value": "x"}]}}}),
            json!({"routers": {"pod": {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}}}),
            json!({"storage": {"pod": {"volumes": [{"name": "data", "mountPath": "/x", "emptyDir": {}}]}}}),
            json!({"storage": {"pod": {"volumes": [{"name": "x", "mountPath": "/data/x", "emptyDir": {}}]}}}),
            json!({"routers": {"pod": {"volumes": [{"name": "x", "mountPath": "/tmp/", "emptyDir": {}}]}}}),
            json!({"routers": {"pod": {"volumes": [{"name": "x", "mountPath": "relative", "emptyDir": {}}]}}}),
            json!({"routers": {"pod": {"volumes": [{"name": "x", "mountPath": "/x"}]}}}),
            json!({"routers": {"pod": {"volumes": [{"name": "x", "mountPath": "/x", "emptyDir": {}, "secret": {"secretName": "s"}}]}}}),
            json!({"routers": {"pod": {"volumes": [{"name": "a", "mountPath": "/x", "emptyDir": {}}, {"name": "b", "mountPath": "/x/", "emptyDir": {}}]}}}),
        ];
        for patch in refused {
            let result = owned_objects(&with_spec(patch.clone()), 3, 3, OPERATOR_NS);
            assert!(matches!(result, Err(TopologyError::PodTemplate { .. })), "{patch} was accepted");
        }
        let fine = json!({"storage": {"pod": {"env": [{"name": "DATA", "value": "1"}],
                          "volumes": [{"name": "database", "mountPath": "/database", "emptyDir": {}}]}}});
        owned_objects(&with_spec(fine), 3, 3, OPERATOR_NS).unwrap();
    }

    fn policy<'a>(objects: &'a [Owned], name: &str) -> &'a NetworkPolicySpec {
        objects
            .iter()
            .find_map(|o| match o {
                Owned::NetworkPolicy(p) if p.metadata.name.as_deref() == Some(name) => p.spec.as_ref(),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no NetworkPolicy {name}"))
    }

    /// The sources a policy admits on `port`: `None` for anywhere.
    fn admitted(spec: &NetworkPolicySpec, port: i32) -> Option<Vec<NetworkPolicyPeer>> {
        let rules: Vec<_> = spec
            .ingress
            .iter()
            .flatten()
            .filter(|r| r.ports.iter().flatten().any(|p| p.port == Some(IntOrString::Int(port))))
            .collect();
        assert_eq!(rules.len(), 1, "port {port} is in exactly one rule");
        rules[0].from.clone()
    }

    #[test]
    fn network_policies_admit_only_what_each_component_needs() {
        let objects = owned_objects(&cluster(3, 3), 3, 3, OPERATOR_NS).unwrap();
        let names = Names::of(&cluster(3, 3)).unwrap();
        let pods_of = |c: &str| NetworkPolicyPeer {
            pod_selector: Some(match_labels(selector(&names, c))),
            ..NetworkPolicyPeer::default()
        };
        let operator = NetworkPolicyPeer {
            namespace_selector: Some(namespace_named(OPERATOR_NS)),
            pod_selector: Some(match_labels(operator_pods())),
            ..NetworkPolicyPeer::default()
        };
        let monitoring = NetworkPolicyPeer {
            namespace_selector: Some(namespace_named("monitoring")),
            ..NetworkPolicyPeer::default()
        };

        let nodes = policy(&objects, "obs-node");
        assert_eq!(nodes.pod_selector, Some(match_labels(selector(&names, "node"))));
        assert_eq!(nodes.policy_types.as_deref(), Some(&["Ingress".to_owned()][..]));
        assert_eq!(admitted(nodes, NODE_GRPC_PORT), Some(vec![pods_of("router"), pods_of("node"), operator.clone()]));
        assert_eq!(admitted(nodes, NODE_HTTP_PORT), Some(vec![operator.clone(), monitoring.clone()]));

        let routers = policy(&objects, "obs-router");
        assert_eq!(admitted(routers, ROUTER_HTTP_PORT), None, "public from anywhere");
        assert_eq!(admitted(routers, ROUTER_OTLP_GRPC_PORT), None);
        assert_eq!(admitted(routers, ROUTER_INTERNAL_PORT), Some(vec![operator, monitoring]));

        let custom =
            with_spec(json!({"networkPolicy": {"metricsNamespaceSelector": {"matchLabels": {"team": "o11y"}}}}));
        let objects = owned_objects(&custom, 3, 3, OPERATOR_NS).unwrap();
        let peers = admitted(policy(&objects, "obs-router"), ROUTER_INTERNAL_PORT).unwrap();
        let team = match_labels(BTreeMap::from([("team".to_owned(), "o11y".to_owned())]));
        assert_eq!(peers[1].namespace_selector, Some(team));

        let empty = with_spec(json!({"networkPolicy": {"metricsNamespaceSelector": {"matchLabels": {}}}}));
        let objects = owned_objects(&empty, 3, 3, OPERATOR_NS).unwrap();
        let peers = admitted(policy(&objects, "obs-node"), NODE_HTTP_PORT).unwrap();
        assert_eq!(peers[1].namespace_selector, Some(namespace_named("monitoring")), "not every namespace");

        let off = with_spec(json!({"networkPolicy": {"enabled": false}}));
        let objects = owned_objects(&off, 3, 3, OPERATOR_NS).unwrap();
        assert!(!objects.iter().any(|o| matches!(o, Owned::NetworkPolicy(_))));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

            /// Whatever extra env and volumes a user gives (with distinct, free names): the
            /// operator's come first and unchanged, the user's follow in their order, no name twice.
            #[test]
            fn extra_env_and_volumes_follow_the_operators_in_order(
                env in proptest::collection::btree_set("[A-Z][A-Z0-9_]{0,6}", 0..6),
                volumes in proptest::collection::btree_set("[a-z][a-z0-9]{0,6}", 0..5),
                shuffle in any::<u64>(),
                duplicate in any::<bool>(),
            ) {
                let mut env: Vec<String> = env.into_iter().filter(|n| !n.starts_with("SEXTANT_")).collect();
                let mut volumes: Vec<String> =
                    volumes.into_iter().filter(|n| !RESERVED_VOLUMES.contains(&n.as_str())).collect();
                let rotate = |v: &mut Vec<String>| if !v.is_empty() { let k = (shuffle as usize) % v.len(); v.rotate_left(k) };
                rotate(&mut env);
                rotate(&mut volumes);
                let builtin = owned_objects(&cluster(3, 3), 3, 3, OPERATOR_NS).unwrap();
                let (builtin_node, _) = pods(&builtin);
                let mut given_env = env.clone();
                if duplicate && !env.is_empty() {
                    given_env.push(env[0].clone());
                }
                let c = with_spec(json!({"storage": {"pod": {
                    "env": given_env.iter().map(|n| json!({"name": n, "value": "v"})).collect::<Vec<_>>(),
                    "volumes": volumes.iter().map(|n| json!({"name": n, "mountPath": format!("/extra/{n}"), "emptyDir": {}})).collect::<Vec<_>>(),
                }}}));
                let result = owned_objects(&c, 3, 3, OPERATOR_NS);
                if duplicate && !env.is_empty() {
                    let refused = matches!(result, Err(TopologyError::PodTemplate { .. }));
                    prop_assert!(refused, "a duplicate env name was accepted");
                    return Ok(());
                }
                let (node, _) = pods(&result.unwrap());
                let names = |e: &Option<Vec<EnvVar>>| e.iter().flatten().map(|e| e.name.clone()).collect::<Vec<_>>();
                let mut expected = names(&builtin_node.containers[0].env);
                expected.extend(env.iter().cloned());
                prop_assert_eq!(names(&node.containers[0].env), expected);

                let volume_names: Vec<String> = node.volumes.iter().flatten().map(|v| v.name.clone()).collect();
                let mut expected: Vec<String> = builtin_node.volumes.iter().flatten().map(|v| v.name.clone()).collect();
                expected.extend(volumes.iter().cloned());
                prop_assert_eq!(&volume_names, &expected);
                let mounts: Vec<String> =
                    node.containers[0].volume_mounts.iter().flatten().map(|m| m.name.clone()).collect();
                // Every mount names a volume of the pod (the PVC's `data` comes from the claim template).
                for m in &mounts {
                    prop_assert!(m == "data" || volume_names.contains(m), "{}", m);
                }
                prop_assert_eq!(mounts.len(), volume_names.len() + 1);
            }

            #[test]
            fn objects_agree_with_each_other_for_any_size(nodes in 1i32..40, rf in 1i32..=7, replicas in 0i32..40, http in 1i32..65535) {
                let mut c = cluster(nodes, rf);
                c.spec.routers.service.http_port = http;
                c.spec.routers.service.otlp_grpc_port = if http == 4317 { 4318 } else { 4317 };
                let objects = owned_objects(&c, replicas, nodes, OPERATOR_NS).unwrap();
                let names = Names::of(&c).unwrap();
                for o in &objects {
                    prop_assert!(o.name().starts_with("obs-"), "{}", o.name());
                    if let Owned::ConfigMap(cm) = o {
                        let data = cm.data.as_ref().unwrap();
                        prop_assert_eq!(data["peers"].split(',').count() as i32, nodes);
                        prop_assert_eq!(data["replication-factor"].parse::<i32>().unwrap(), rf);
                        for (i, peer) in data["peers"].split(',').enumerate() {
                            let (id, addr) = peer.split_once('=').unwrap();
                            prop_assert_eq!(id.parse::<i32>().unwrap(), i as i32 + 1);
                            prop_assert_eq!(names.ordinal_of(addr), Some(i as i32));
                        }
                    }
                    if let Owned::StatefulSet(s) = o {
                        prop_assert_eq!(s.spec.as_ref().unwrap().replicas, Some(replicas));
                    }
                    if let Owned::PodDisruptionBudget(p) = o {
                        let max = p.spec.as_ref().unwrap().max_unavailable.clone().unwrap();
                        let k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(max) = max else { panic!() };
                        // Never more than a minority of any group may be down.
                        prop_assert!(max >= 1 && (rf < 3 || max < (rf + 1) / 2 + 1 && max <= (rf - 1) / 2));
                    }
                }
                prop_assert_eq!(names.router_url(http, false), format!("http://obs-router.telemetry.svc:{http}"));
                prop_assert_eq!(names.router_url(http, true), format!("https://obs-router.telemetry.svc:{http}"));
                // Only the internal Service reaches the internal port, whatever the public ports.
                for o in &objects {
                    if let Owned::Service(svc) = o {
                        let internal = service_ports(svc).iter().any(|(_, _, target)| target == "internal");
                        prop_assert_eq!(internal, o.name() == "obs-router-internal", "{}", o.name());
                    }
                }
            }
        }
    }
}

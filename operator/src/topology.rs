//! The Kubernetes objects a `SextantCluster` owns, derived from its spec alone (plus the node
//! count the scaling plan allows right now). Pure: no API calls, no clock, no randomness.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, Secret,
    SecretKeySelector, Service, ServicePort, ServiceSpec, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::v1alpha1::SextantCluster;

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
    pub fn router_url(&self, http_port: i32) -> String {
        format!("http://{}.{}.svc:{http_port}", self.routers(), self.namespace)
    }
    /// Where OTLP/gRPC exporters send (plain text).
    pub fn router_otlp_grpc_url(&self, otlp_grpc_port: i32) -> String {
        format!("http://{}.{}.svc:{otlp_grpc_port}", self.routers(), self.namespace)
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
    Service(Service),
    StatefulSet(StatefulSet),
    Deployment(Deployment),
    PodDisruptionBudget(PodDisruptionBudget),
}

impl Owned {
    pub fn name(&self) -> String {
        match self {
            Owned::ConfigMap(o) => o.name_any(),
            Owned::Service(o) => o.name_any(),
            Owned::StatefulSet(o) => o.name_any(),
            Owned::Deployment(o) => o.name_any(),
            Owned::PodDisruptionBudget(o) => o.name_any(),
        }
    }
    pub fn kind(&self) -> &'static str {
        match self {
            Owned::ConfigMap(_) => "ConfigMap",
            Owned::Service(_) => "Service",
            Owned::StatefulSet(_) => "StatefulSet",
            Owned::Deployment(_) => "Deployment",
            Owned::PodDisruptionBudget(_) => "PodDisruptionBudget",
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
fn http_probe(path: &str, period_seconds: i32, failure_threshold: Option<i32>) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("http".into()),
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
pub fn owned_objects(
    cluster: &SextantCluster,
    node_replicas: i32,
    member_nodes: i32,
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
    let node_container = Container {
        name: "node".into(),
        image: Some(spec.image.clone()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), node_script.into()]),
        env: Some(vec![
            config_env("SEXTANT_PEERS", &names, "peers"),
            config_env("SEXTANT_SHARDS", &names, "shards"),
            config_env("SEXTANT_REPLICATION_FACTOR", &names, "replication-factor"),
            secret_env("SEXTANT_CLUSTER_SECRET", &names, CLUSTER_SECRET),
            value_env("SEXTANT_LOG_FORMAT", "json"),
        ]),
        ports: Some(vec![container_port("grpc", NODE_GRPC_PORT), container_port("http", NODE_HTTP_PORT)]),
        readiness_probe: Some(http_probe("/readyz", 5, None)),
        liveness_probe: Some(http_probe("/healthz", 10, Some(6))),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..VolumeMount::default()
        }]),
        resources: storage.resources.clone(),
        ..Container::default()
    };
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
                spec: Some(PodSpec {
                    termination_grace_period_seconds: Some(60),
                    // The image runs as uid 10001; fsGroup makes the fresh volume writable.
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(10001),
                        fs_group: Some(10001),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![node_container],
                    ..PodSpec::default()
                }),
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
    let router_container = Container {
        name: "router".into(),
        image: Some(spec.image.clone()),
        args: Some(vec![
            "router".into(),
            "--listen".into(),
            format!("0.0.0.0:{ROUTER_HTTP_PORT}"),
            "--internal-listen".into(),
            format!("0.0.0.0:{ROUTER_INTERNAL_PORT}"),
            "--otlp-grpc-listen".into(),
            format!("0.0.0.0:{ROUTER_OTLP_GRPC_PORT}"),
            "--nodes".into(),
            "$(SEXTANT_NODES)".into(),
        ]),
        env: Some(router_env),
        ports: Some(vec![
            container_port("http", ROUTER_HTTP_PORT),
            container_port("internal", ROUTER_INTERNAL_PORT),
            container_port("otlp-grpc", ROUTER_OTLP_GRPC_PORT),
        ]),
        readiness_probe: Some(http_probe("/readyz", 5, None)),
        liveness_probe: Some(http_probe("/healthz", 10, None)),
        resources: spec.routers.resources.clone(),
        ..Container::default()
    };
    let deployment = Deployment {
        metadata: metadata(&names, names.routers(), "router", &owner),
        spec: Some(DeploymentSpec {
            replicas: Some(if stopped { 0 } else { spec.routers.replicas }),
            selector: match_labels(selector(&names, "router")),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels(&names, "router")), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(10001),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![router_container],
                    ..PodSpec::default()
                }),
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

    Ok(vec![
        Owned::ConfigMap(config),
        Owned::Service(headless),
        Owned::StatefulSet(statefulset),
        Owned::Deployment(deployment),
        Owned::Service(router_service),
        Owned::Service(internal_service),
        Owned::PodDisruptionBudget(pdb),
    ])
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::v1alpha1::SextantClusterSpec;

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
        let objects = owned_objects(&cluster(3, 3), 3, 3).unwrap();
        assert_eq!(objects.len(), 7);
        for o in &objects {
            let meta = match o {
                Owned::ConfigMap(x) => &x.metadata,
                Owned::Service(x) => &x.metadata,
                Owned::StatefulSet(x) => &x.metadata,
                Owned::Deployment(x) => &x.metadata,
                Owned::PodDisruptionBudget(x) => &x.metadata,
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
        let sts = statefulset(&owned_objects(&c, 4, 4).unwrap()).clone();
        let spec = sts.spec.unwrap();
        assert_eq!(spec.replicas, Some(4));
        assert_eq!(spec.service_name.as_deref(), Some("obs-node"));
        let claim = &spec.volume_claim_templates.unwrap()[0];
        assert_eq!(claim.metadata.name.as_deref(), Some("data"));

        let mut stopped = c.clone();
        stopped.spec.cluster_operation.stopped = true;
        let objects = owned_objects(&stopped, 4, 4).unwrap();
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
        let objects = owned_objects(&c, 3, 3).unwrap();
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
    fn one_port_for_http_and_otlp_grpc_is_refused() {
        let mut c = cluster(3, 3);
        c.spec.routers.service.otlp_grpc_port = c.spec.routers.service.http_port;
        assert!(matches!(owned_objects(&c, 3, 3), Err(TopologyError::Invalid(_))));
    }

    #[test]
    fn routers_serve_metrics_and_admin_on_an_internal_cluster_ip_service() {
        let mut c = cluster(3, 3);
        c.spec.routers.service.type_ = crate::v1alpha1::ServiceType::LoadBalancer;
        let objects = owned_objects(&c, 3, 3).unwrap();
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
            "routers": {"replicas": 3, "service": {"type": "LoadBalancer", "httpPort": 80,
                        "annotations": {"example.com/lb": "internal"}},
                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}},
            "storage": {"nodes": 5, "shards": 8, "replicationFactor": 5, "volumeSize": "50Gi",
                        "storageClassName": "fast", "resources": {"limits": {"memory": "4Gi"}}},
            "tls": {"secretName": "obs-tls"},
        }))
        .unwrap();
        let mut n = 0;
        let secret = internal_secret(&c, || {
            n += 1;
            format!("v{n}")
        })
        .unwrap();
        let mut out = vec![serde_json::to_value(&secret).unwrap()];
        let objects = owned_objects(&c, 4, 3).unwrap().into_iter().chain(owned_objects(&cluster(3, 3), 3, 3).unwrap());
        for o in objects {
            out.push(
                match o {
                    Owned::ConfigMap(x) => serde_json::to_value(x),
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

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

            #[test]
            fn objects_agree_with_each_other_for_any_size(nodes in 1i32..40, rf in 1i32..=7, replicas in 0i32..40, http in 1i32..65535) {
                let mut c = cluster(nodes, rf);
                c.spec.routers.service.http_port = http;
                c.spec.routers.service.otlp_grpc_port = if http == 4317 { 4318 } else { 4317 };
                let objects = owned_objects(&c, replicas, nodes).unwrap();
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
                prop_assert_eq!(names.router_url(http), format!("http://obs-router.telemetry.svc:{http}"));
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

//! kube-rs controllers: they observe, call the pure planners and execute the actions.

mod alert_rule;
pub mod cluster;
mod internal_tls;
mod plan;
mod project;
mod pushed;
mod quota;
mod tenant;
mod volume_expansion;
mod zones;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use rand::RngCore;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::admin::{AdminConnector, AdminEndpoint, AdminError, ClusterAdmin};
use crate::metrics::Metrics;
use crate::tenancy::TenancyError;
use crate::topology::{Names, TopologyError, ADMIN_TOKEN};
use crate::v1alpha1::{AlertRule, Plan, Project, Quota, SextantCluster, Tenant};

/// The one field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "sextant-operator";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Tenancy(#[from] TenancyError),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("encoding status: {0}")]
    Encode(#[from] serde_json::Error),
    /// Not a failure: something this resource depends on is not there yet.
    #[error("waiting: {0}")]
    Waiting(String),
    #[error("Secret {0} has no usable `{1}`")]
    BadSecret(String, &'static str),
}

impl Error {
    /// A short label for metrics (`sextant_operator_reconcile_errors_total`).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(e)) => match e.code {
                403 => "kube_forbidden",
                404 => "kube_not_found",
                409 => "kube_conflict",
                422 => "kube_invalid",
                429 => "kube_throttled",
                _ => "kube_api",
            },
            Error::Kube(_) => "kube_transport",
            Error::Admin(AdminError::Transport(_)) => "admin_unreachable",
            Error::Admin(AdminError::Status { .. }) => "admin_refused",
            Error::Topology(_) => "invalid_spec",
            Error::Tenancy(_) => "tenancy",
            Error::Finalizer(f) => match f.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e) | kube::runtime::finalizer::Error::CleanupFailed(e) => {
                    e.reason()
                }
                _ => "finalizer",
            },
            Error::Encode(_) => "encode",
            Error::Waiting(_) => "waiting",
            Error::BadSecret(..) => "bad_secret",
        }
    }

    fn is_waiting(&self) -> bool {
        match self {
            Error::Waiting(_) => true,
            Error::Finalizer(f) => matches!(
                f.as_ref(),
                kube::runtime::finalizer::Error::ApplyFailed(Error::Waiting(_))
                    | kube::runtime::finalizer::Error::CleanupFailed(Error::Waiting(_))
            ),
            _ => false,
        }
    }
}

pub type SecretSource = Arc<dyn Fn() -> String + Send + Sync>;
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub admin: Arc<dyn AdminConnector>,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// Generates secret material (random in production, predictable in tests).
    pub secrets: SecretSource,
    pub clock: Clock,
    /// Namespaces watched in namespace mode (`--watch-namespace`); empty: every namespace.
    pub watch_namespaces: Vec<String>,
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, admin: Arc<dyn AdminConnector>, metrics: Arc<Metrics>, reporter: Reporter) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            admin,
            metrics,
            secrets: Arc::new(random_secret),
            clock: Arc::new(Timestamp::now),
            watch_namespaces: Vec::new(),
            failures: Mutex::default(),
        }
    }

    /// Records a Normal or Warning event on `obj`; a failure to record is logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(&self, obj: &K, warning: bool, reason: &str, note: String) {
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_owned(),
            note: Some(note),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "could not record event");
        }
    }

    /// The admin API of a cluster, reached through its internal router Service with the admin
    /// token.
    pub async fn admin_of(&self, cluster: &SextantCluster) -> Result<Arc<dyn ClusterAdmin>, Error> {
        let names = Names::of(cluster)?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &names.namespace);
        let secret = secrets
            .get_opt(&names.secret())
            .await?
            .ok_or_else(|| Error::Waiting(format!("Secret {} is not created yet", names.secret())))?;
        self.connect(cluster, &secret)
    }

    pub fn connect(&self, cluster: &SextantCluster, secret: &Secret) -> Result<Arc<dyn ClusterAdmin>, Error> {
        let names = Names::of(cluster)?;
        let token = secret
            .data
            .as_ref()
            .and_then(|d| d.get(ADMIN_TOKEN))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .or_else(|| secret.string_data.as_ref().and_then(|d| d.get(ADMIN_TOKEN).cloned()))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Error::BadSecret(names.secret(), ADMIN_TOKEN))?;
        Ok(self.admin.connect(AdminEndpoint { url: names.router_internal_url(), token }))
    }

    /// The cluster a namespaced resource belongs to: the named one, or the namespace's only one.
    /// `None` when there is none at all (e.g. the namespace is being deleted).
    pub async fn cluster_in(&self, namespace: &str, name: Option<&str>) -> Result<Option<SextantCluster>, Error> {
        let api: Api<SextantCluster> = Api::namespaced(self.client.clone(), namespace);
        if let Some(name) = name {
            return Ok(api.get_opt(name).await?);
        }
        let mut list = api.list(&ListParams::default()).await?.items;
        match list.len() {
            0 => Ok(None),
            1 => Ok(list.pop()),
            n => Err(Error::Waiting(format!(
                "{n} SextantClusters in namespace {namespace}: set spec.cluster on the Tenant"
            ))),
        }
    }

    /// One `Api` per watched namespace, or one for all namespaces outside namespace mode.
    pub fn scoped_apis<K>(&self) -> Vec<Api<K>>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        scopes(&self.watch_namespaces).into_iter().map(|ns| scoped(&self.client, ns)).collect()
    }

    fn backoff(&self, key: String) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        backoff_delay(*n)
    }

    fn succeeded(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// 5 s, 10 s, 20 s … capped at 5 minutes.
pub fn backoff_delay(failures: u32) -> Duration {
    let secs = 5u64.saturating_mul(1u64 << failures.saturating_sub(1).min(16));
    Duration::from_secs(secs.min(300))
}

fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!("{}/{}/{}", K::kind(&()), obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Runs a reconcile with metrics, backoff bookkeeping and a Warning event on failure.
pub async fn instrumented<K, F>(
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    run: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: std::future::Future<Output = Result<Action, Error>>,
{
    let started = std::time::Instant::now();
    let result = run.await;
    ctx.metrics.observe(controller, started.elapsed(), result.as_ref().err().map(|e| !e.is_waiting()));
    if let Err(e) = &result {
        if !e.is_waiting() {
            ctx.metrics.observe_error(controller, e.reason());
        }
    }
    match &result {
        Ok(_) => ctx.succeeded(&object_key(obj.as_ref())),
        Err(e) if e.is_waiting() => {}
        Err(e) => ctx.event(obj.as_ref(), true, "ReconcileFailed", e.to_string()).await,
    }
    result
}

/// Waiting requeues soon; failures back off exponentially per object.
pub fn error_policy<K: Resource<DynamicType = ()>>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    if error.is_waiting() {
        tracing::info!(object = %object_key(obj.as_ref()), "{error}");
        return Action::requeue(Duration::from_secs(15));
    }
    let delay = ctx.backoff(object_key(obj.as_ref()));
    tracing::warn!(object = %object_key(obj.as_ref()), ?delay, "reconcile failed: {error}");
    Action::requeue(delay)
}

/// Server-side apply of `obj` with the operator's field manager.
pub async fn apply<K>(client: &Client, namespace: &str, obj: &K) -> Result<K, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api.patch(&obj.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj)).await?)
}

/// Writes `status` when it differs from what the object has.
pub async fn write_status<K, S>(api: &Api<K>, obj: &K, current: Option<&S>, status: &S) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(());
    }
    let patch = serde_json::json!({"status": status});
    api.patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Runs every controller until the stream ends (shutdown signal or leadership loss): once for
/// all namespaces, or in namespace mode once per watched namespace. Plans are cluster-scoped and
/// watched once either way.
pub async fn run_all(ctx: Arc<Context>) {
    let scoped_controllers: Vec<_> =
        scopes(&ctx.watch_namespaces).into_iter().map(|ns| run_in(ctx.clone(), ns)).collect();
    let plans = Controller::new(Api::<Plan>::all(ctx.client.clone()), watcher::Config::default())
        .shutdown_on_signal()
        .run(plan::reconcile_plan, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    futures::join!(futures::future::join_all(scoped_controllers), plans);
}

/// `[None]` (all namespaces) or each watched namespace.
fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().cloned().map(Some).collect()
    }
}

/// `Api::all`, or `Api::namespaced` in one watched namespace.
fn scoped<K>(client: &Client, namespace: Option<String>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), &ns),
        None => Api::all(client.clone()),
    }
}

/// The controllers of namespaced kinds, in `namespace` or in all of them.
async fn run_in(ctx: Arc<Context>, namespace: Option<String>) {
    let client = ctx.client.clone();
    let cfg = watcher::Config::default;
    let clusters = Controller::new(scoped::<SextantCluster>(&client, namespace.clone()), cfg())
        .owns(
            scoped::<StatefulSet>(&client, namespace.clone()),
            cfg().labels("app.kubernetes.io/managed-by=sextant-operator"),
        )
        .owns(
            scoped::<Deployment>(&client, namespace.clone()),
            cfg().labels("app.kubernetes.io/managed-by=sextant-operator"),
        )
        .owns(
            scoped::<Service>(&client, namespace.clone()),
            cfg().labels("app.kubernetes.io/managed-by=sextant-operator"),
        )
        .owns(
            scoped::<ConfigMap>(&client, namespace.clone()),
            cfg().labels("app.kubernetes.io/managed-by=sextant-operator"),
        )
        .owns(
            scoped::<PodDisruptionBudget>(&client, namespace.clone()),
            cfg().labels("app.kubernetes.io/managed-by=sextant-operator"),
        )
        .owns(
            scoped::<ServiceAccount>(&client, namespace.clone()),
            cfg().labels("app.kubernetes.io/managed-by=sextant-operator"),
        )
        .owns(
            scoped::<NetworkPolicy>(&client, namespace.clone()),
            cfg().labels("app.kubernetes.io/managed-by=sextant-operator"),
        )
        .shutdown_on_signal()
        .run(cluster::reconcile, error_policy, ctx.clone())
        .for_each({
            let metrics = ctx.metrics.clone();
            move |result| {
                // A deleted cluster is reported as not found once its watch event arrives.
                if let Err(kube::runtime::controller::Error::ObjectNotFound(gone)) = result {
                    metrics.forget_cluster(gone.namespace.as_deref().unwrap_or_default(), &gone.name);
                }
                futures::future::ready(())
            }
        });
    // A tenant being deleted waits for its projects: wake it when one goes.
    let tenants = Controller::new(scoped::<Tenant>(&client, namespace.clone()), cfg())
        .watches(scoped::<Project>(&client, namespace.clone()), cfg(), |p| {
            let ns = p.namespace()?;
            Some(ObjectRef::<Tenant>::new(&p.spec.tenant).within(&ns))
        })
        .shutdown_on_signal()
        .run(tenant::reconcile_tenant, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    // Dependents wake as soon as what they wait for changes (a Tenant becoming Ready, …),
    // found through each controller's own cache.
    let projects = Controller::new(scoped::<Project>(&client, namespace.clone()), cfg());
    let cached = projects.store();
    let projects = projects
        .watches(scoped::<Tenant>(&client, namespace.clone()), cfg(), move |t| {
            dependents(&cached, &t, |p: &Project| p.spec.tenant == t.name_any())
        })
        .shutdown_on_signal()
        .run(project::reconcile_project, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let quotas = Controller::new(scoped::<Quota>(&client, namespace.clone()), cfg());
    let (by_tenant, by_project) = (quotas.store(), quotas.store());
    let quotas = quotas
        .watches(scoped::<Tenant>(&client, namespace.clone()), cfg(), move |t| {
            dependents(&by_tenant, &t, |q: &Quota| q.spec.tenant.as_deref() == Some(&t.name_any()))
        })
        .watches(scoped::<Project>(&client, namespace.clone()), cfg(), move |p| {
            dependents(&by_project, &p, |q: &Quota| q.spec.project.as_deref() == Some(&p.name_any()))
        })
        .shutdown_on_signal()
        .run(quota::reconcile_quota, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let rules = Controller::new(scoped::<AlertRule>(&client, namespace.clone()), cfg());
    let cached = rules.store();
    let rules = rules
        .watches(scoped::<Project>(&client, namespace.clone()), cfg(), move |p| {
            dependents(&cached, &p, |r: &AlertRule| r.spec.project == p.name_any())
        })
        .shutdown_on_signal()
        .run(alert_rule::reconcile_alert_rule, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    // Node pods' zones, from their Kubernetes nodes: a separate loop, so a cluster's
    // reconcile never waits on pods being scheduled.
    let zones = Controller::new(scoped::<SextantCluster>(&client, namespace.clone()), cfg())
        .owns(
            scoped::<StatefulSet>(&client, namespace.clone()),
            cfg().labels("app.kubernetes.io/managed-by=sextant-operator"),
        )
        .shutdown_on_signal()
        .run(zones::reconcile, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    futures::join!(clusters, tenants, projects, quotas, rules, zones);
}

/// Objects in `cache` in the namespace of `changed` that refer to it.
fn dependents<K, R>(cache: &Store<K>, changed: &R, refers: impl Fn(&K) -> bool) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    R: Resource,
{
    let namespace = changed.meta().namespace.clone();
    cache
        .state()
        .iter()
        .filter(|k| k.meta().namespace == namespace && refers(k))
        .map(|k| ObjectRef::from_obj(k.as_ref()))
        .collect()
}

#[cfg(test)]
pub(crate) mod mock;
#[cfg(test)]
mod rbac_check;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every controller lists and watches exactly the kinds it needs, with the chart's RBAC.
    #[tokio::test]
    async fn controllers_watch_only_what_the_chart_allows() {
        use std::collections::BTreeSet;

        use http::{Request, Response};
        use kube::client::Body;

        use crate::admin::fake::{FakeAdmin, FakeConnector};

        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let ctx = Arc::new(Context::new(
            Client::new(service, "default"),
            Arc::new(FakeConnector(Arc::new(FakeAdmin::default()))),
            Arc::new(Metrics::default()),
            Reporter { controller: "sextant-operator".into(), instance: None },
        ));
        let controllers = tokio::spawn(run_all(ctx));
        let mut seen = BTreeSet::new();
        let mut problems = vec![];
        let mut held = vec![];
        let deadline = tokio::time::sleep(Duration::from_secs(3));
        tokio::pin!(deadline);
        // Until every controller has listed and started watching its kinds.
        while seen.iter().filter(|(_, verb, _)| verb == "watch").count() < 13 {
            let (request, send) = tokio::select! {
                _ = &mut deadline => break,
                next = handle.next_request() => match next { Some(r) => r, None => break },
            };
            let (method, path) = (request.method().to_string(), request.uri().path().to_owned());
            let query = request.uri().query().unwrap_or_default().to_owned();
            if let Err(e) = rbac_check::check(&method, &path, &query) {
                problems.push(e);
            }
            let Some((_, resource, verb)) = rbac_check::operation(&method, &path, &query) else {
                problems.push(format!("unexpected {method} {path}"));
                continue;
            };
            let labelled = query.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dsextant-operator");
            seen.insert((resource, verb.clone(), labelled));
            if verb == "watch" {
                held.push(send); // an open watch with no events yet
            } else {
                let empty = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []});
                send.send_response(Response::new(Body::from(serde_json::to_vec(&empty).unwrap())));
            }
        }
        controllers.abort();
        assert!(problems.is_empty(), "{problems:?}");
        let watched: BTreeSet<(String, bool)> =
            seen.iter().filter(|(_, verb, _)| verb == "watch").map(|(r, _, l)| (r.clone(), *l)).collect();
        let expected: BTreeSet<(String, bool)> = [
            ("sextantclusters", false),
            ("tenants", false),
            ("projects", false),
            ("plans", false),
            ("quotas", false),
            ("alertrules", false),
            // Owned kinds are watched only where the operator's label is.
            ("statefulsets", true),
            ("deployments", true),
            ("services", true),
            ("configmaps", true),
            ("poddisruptionbudgets", true),
            ("serviceaccounts", true),
            ("networkpolicies", true),
        ]
        .into_iter()
        .map(|(r, l)| (r.to_owned(), l))
        .collect();
        assert_eq!(watched, expected);
    }

    /// In namespace mode every request is confined to the watched namespaces, except those on
    /// cluster-scoped Plans.
    #[tokio::test]
    async fn namespace_mode_requests_only_the_watched_namespaces() {
        use std::collections::BTreeSet;

        use http::{Request, Response};
        use kube::client::Body;

        use crate::admin::fake::{FakeAdmin, FakeConnector};

        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let mut ctx = Context::new(
            Client::new(service, "default"),
            Arc::new(FakeConnector(Arc::new(FakeAdmin::default()))),
            Arc::new(Metrics::default()),
            Reporter { controller: "sextant-operator".into(), instance: None },
        );
        ctx.watch_namespaces = vec!["shop".into(), "blog".into()];
        let controllers = tokio::spawn(run_all(Arc::new(ctx)));
        let mut watched = BTreeSet::new();
        let mut outside = vec![];
        let mut held = vec![];
        let deadline = tokio::time::sleep(Duration::from_secs(3));
        tokio::pin!(deadline);
        // 12 namespaced watches in each of the two namespaces, and the Plans'.
        while watched.len() < 2 * 12 + 1 {
            let (request, send) = tokio::select! {
                _ = &mut deadline => break,
                next = handle.next_request() => match next { Some(r) => r, None => break },
            };
            let path = request.uri().path().to_owned();
            let query = request.uri().query().unwrap_or_default().to_owned();
            let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let namespace = match segments.as_slice() {
                ["api", "v1", "namespaces", ns, _, ..] | ["apis", _, _, "namespaces", ns, _, ..] => {
                    Some(ns.to_string())
                }
                _ => None,
            };
            let plans = path == "/apis/sextant.dev/v1alpha1/plans";
            match &namespace {
                Some(ns) if ns == "shop" || ns == "blog" => {}
                _ if plans => {}
                _ => outside.push(path.clone()),
            }
            if query.contains("watch=true") {
                watched.insert((namespace, segments.last().copied().unwrap_or_default().to_owned()));
                held.push(send);
            } else {
                let empty = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []});
                send.send_response(Response::new(Body::from(serde_json::to_vec(&empty).unwrap())));
            }
        }
        controllers.abort();
        assert!(outside.is_empty(), "requests outside the watched namespaces: {outside:?}");
        for ns in ["shop", "blog"] {
            for kind in ["sextantclusters", "tenants", "projects", "quotas", "alertrules", "statefulsets", "services"] {
                assert!(
                    watched.contains(&(Some(ns.to_owned()), kind.to_owned())),
                    "{kind} not watched in {ns}: {watched:?}"
                );
            }
        }
        assert!(watched.contains(&(None, "plans".to_owned())), "{watched:?}");
    }

    #[test]
    fn dependents_are_found_in_the_same_namespace_only() {
        use crate::v1alpha1::ProjectSpec;

        let (store, mut writer) = kube::runtime::reflector::store::<Project>();
        for (ns, name, tenant) in [("a", "shop", "acme"), ("a", "blog", "other"), ("b", "shop", "acme")] {
            let mut p = Project::new(name, ProjectSpec { tenant: tenant.into(), name: name.into() });
            p.metadata.namespace = Some(ns.into());
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        let mut acme: Tenant = serde_json::from_value(serde_json::json!({
            "apiVersion": "sextant.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": "acme", "namespace": "a"},
            "spec": {"displayName": "Acme", "plan": "pro", "ownerEmail": "o@acme.test"}
        }))
        .unwrap();
        let found = dependents(&store, &acme, |p: &Project| p.spec.tenant == "acme");
        assert_eq!(found, vec![ObjectRef::<Project>::new("shop").within("a")]);
        acme.metadata.namespace = Some("c".into());
        assert!(dependents(&store, &acme, |p: &Project| p.spec.tenant == "acme").is_empty());
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let d: Vec<u64> = (1..=9).map(|n| backoff_delay(n).as_secs()).collect();
        assert_eq!(d, vec![5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff_delay(u32::MAX).as_secs(), 300);
    }
}

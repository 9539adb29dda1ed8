//! Tenant, Project, Plan, Quota and AlertRule → the cluster's admin API, with finalizers so
//! the cluster-side objects (and a project's data) go before the resource does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::{Resource, ResourceExt};

use super::{instrumented, write_status, Context, Error};
use crate::admin::{ClusterAdmin, Deletion};
use crate::conditions::{self, Desired};
use crate::tenancy::{self, Apply, Cleanup, Referent, FINALIZER};
use crate::topology::Names;
use crate::v1alpha1::{
    AlertRule, AlertRuleStatus, CommonStatus, Plan, Project, ProjectStatus, Quota, SextantCluster, Tenant, TenantStatus,
};

/// Resources pushed to the cluster are re-pushed now and then, so a cluster restored from an
/// older backup converges again.
const RESYNC: Duration = Duration::from_secs(300);
const RETRY: Duration = Duration::from_secs(30);

fn namespace<K: Resource>(obj: &K) -> Result<String, Error> {
    obj.meta().namespace.clone().ok_or_else(|| Error::Waiting("namespaced resource without a namespace".into()))
}

fn ready(
    now: k8s_openapi::jiff::Timestamp,
    previous: &[Condition],
    generation: Option<i64>,
    d: Desired,
) -> Vec<Condition> {
    conditions::rebuild(previous, vec![d], generation, now)
}

fn synced() -> Desired {
    Desired::new(conditions::READY, true, "Synced", "pushed to the cluster")
}

fn finalizer_error(e: kube::runtime::finalizer::Error<Error>) -> Error {
    Error::Finalizer(Box::new(e))
}

fn deletion(result: Deletion, what: &str) -> Result<Action, Error> {
    match result {
        Deletion::Done => Ok(Action::await_change()),
        Deletion::InProgress => Err(Error::Waiting(format!("the cluster is still deleting {what}"))),
    }
}

/// The admin API of the cluster a namespaced resource lives in. `None` when the namespace has
/// no cluster any more: then there is nothing left to clean up on the cluster side.
async fn admin_in(
    ctx: &Context,
    namespace: &str,
    cluster: Option<&str>,
) -> Result<Option<Arc<dyn ClusterAdmin>>, Error> {
    match ctx.cluster_in(namespace, cluster).await? {
        Some(c) if c.metadata.deletion_timestamp.is_none() => Ok(Some(ctx.admin_of(&c).await?)),
        _ => Ok(None),
    }
}

async fn tenant_cluster(ctx: &Context, namespace: &str, tenant: &str) -> Result<Option<String>, Error> {
    let tenants: Api<Tenant> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(tenants.get_opt(tenant).await?.and_then(|t| t.spec.cluster))
}

// ---- Tenant ----

pub async fn reconcile_tenant(tenant: Arc<Tenant>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented("tenant", tenant.clone(), ctx.clone(), async {
        let api: Api<Tenant> = Api::namespaced(ctx.client.clone(), &namespace(tenant.as_ref())?);
        finalizer(&api, FINALIZER, tenant.clone(), |event| async {
            match event {
                Finalizer::Apply(t) => apply_tenant(&api, t, &ctx).await,
                Finalizer::Cleanup(t) => cleanup_tenant(t, &ctx).await,
            }
        })
        .await
        .map_err(finalizer_error)
    })
    .await
}

async fn projects_of(ctx: &Context, namespace: &str, tenant: &str) -> Result<Vec<String>, Error> {
    let projects: Api<Project> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(projects
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.spec.tenant == tenant)
        .map(|p| p.name_any())
        .collect())
}

async fn apply_tenant(api: &Api<Tenant>, tenant: Arc<Tenant>, ctx: &Context) -> Result<Action, Error> {
    let ns = namespace(tenant.as_ref())?;
    let previous = tenant.status.clone().unwrap_or_default();
    let plan_exists = Api::<Plan>::all(ctx.client.clone()).get_opt(&tenant.spec.plan).await?.is_some();
    let projects = projects_of(ctx, &ns, &tenant.name_any()).await?.len() as i32;
    let mut status = TenantStatus { observed_generation: tenant.metadata.generation, projects, ..previous.clone() };
    let now = (ctx.clock)();
    let action = match tenancy::plan_tenant(&tenant, plan_exists)? {
        Apply::Wait(d) => {
            status.conditions = ready(now, &previous.conditions, tenant.metadata.generation, d);
            Action::requeue(RETRY)
        }
        Apply::Push(req) => {
            let admin = admin_in(ctx, &ns, tenant.spec.cluster.as_deref())
                .await?
                .ok_or_else(|| Error::Waiting(format!("no SextantCluster in namespace {ns}")))?;
            let key = tenant.metadata.uid.clone().unwrap_or_default();
            let org = match admin.upsert_tenant(&key, &req).await {
                Ok(org) => org,
                Err(e) => {
                    status.conditions = ready(now, &previous.conditions, tenant.metadata.generation, push_failed(&e));
                    write_status(api, &tenant, tenant.status.as_ref(), &status).await?;
                    return Err(e.into());
                }
            };
            status.org_id = Some(org.org_id);
            status.conditions = ready(now, &previous.conditions, tenant.metadata.generation, synced());
            Action::requeue(RESYNC)
        }
    };
    write_status(api, &tenant, tenant.status.as_ref(), &status).await?;
    Ok(action)
}

async fn cleanup_tenant(tenant: Arc<Tenant>, ctx: &Context) -> Result<Action, Error> {
    let ns = namespace(tenant.as_ref())?;
    let remaining = projects_of(ctx, &ns, &tenant.name_any()).await?;
    match tenancy::cleanup_tenant(&tenant, &remaining)? {
        Cleanup::Wait(message) => {
            ctx.event(tenant.as_ref(), false, "WaitingForProjects", message.clone()).await;
            Err(Error::Waiting(message))
        }
        Cleanup::Delete { key } => match admin_in(ctx, &ns, tenant.spec.cluster.as_deref()).await? {
            Some(admin) => deletion(admin.delete_tenant(&key).await?, "the tenant"),
            None => Ok(Action::await_change()),
        },
    }
}

// ---- Project ----

pub async fn reconcile_project(project: Arc<Project>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented("project", project.clone(), ctx.clone(), async {
        let api: Api<Project> = Api::namespaced(ctx.client.clone(), &namespace(project.as_ref())?);
        finalizer(&api, FINALIZER, project.clone(), |event| async {
            match event {
                Finalizer::Apply(p) => apply_project(&api, p, &ctx).await,
                Finalizer::Cleanup(p) => cleanup_project(p, &ctx).await,
            }
        })
        .await
        .map_err(finalizer_error)
    })
    .await
}

async fn apply_project(api: &Api<Project>, project: Arc<Project>, ctx: &Context) -> Result<Action, Error> {
    let ns = namespace(project.as_ref())?;
    let tenants: Api<Tenant> = Api::namespaced(ctx.client.clone(), &ns);
    let tenant = tenants.get_opt(&project.spec.tenant).await?;
    let referent = tenant
        .as_ref()
        .and_then(|t| Referent::of(t, &t.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default()));
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let secret_name = tenancy::credentials_secret_name(&project);
    let secret_exists = referent.as_ref().is_some_and(|t| t.ready) && secrets.get_opt(&secret_name).await?.is_some();
    let previous = project.status.clone().unwrap_or_default();
    let mut status = ProjectStatus { observed_generation: project.metadata.generation, ..previous.clone() };
    let now = (ctx.clock)();
    let action = match tenancy::plan_project(&project, referent.as_ref(), secret_exists)? {
        Apply::Wait(d) => {
            status.conditions = ready(now, &previous.conditions, project.metadata.generation, d);
            Action::requeue(RETRY)
        }
        Apply::Push(push) => {
            let cluster_name = tenant.as_ref().and_then(|t| t.spec.cluster.clone());
            let cluster = ctx
                .cluster_in(&ns, cluster_name.as_deref())
                .await?
                .ok_or_else(|| Error::Waiting(format!("no SextantCluster in namespace {ns}")))?;
            let admin = ctx.admin_of(&cluster).await?;
            let pushed = async {
                let created = admin.upsert_project(&push.key, &push.request).await?;
                let credentials = match &push.write_secret {
                    Some(_) => Some(admin.issue_credentials(&push.key).await?),
                    None => None,
                };
                Ok::<_, crate::admin::AdminError>((created, credentials))
            };
            let (created, credentials) = match pushed.await {
                Ok(done) => done,
                Err(e) => {
                    status.conditions = ready(now, &previous.conditions, project.metadata.generation, push_failed(&e));
                    write_status(api, &project, project.status.as_ref(), &status).await?;
                    return Err(e.into());
                }
            };
            status.project_id = Some(created.project_id);
            if let (Some(name), Some(credentials)) = (push.write_secret, credentials) {
                let secret = credentials_secret(&project, &cluster, &name, credentials)?;
                write_credentials(&secrets, &project, secret).await?;
                ctx.event(project.as_ref(), false, "CredentialsIssued", format!("wrote Secret {name}")).await;
            }
            status.secret_name = Some(secret_name);
            status.conditions = ready(now, &previous.conditions, project.metadata.generation, synced());
            Action::requeue(RESYNC)
        }
    };
    write_status(api, &project, project.status.as_ref(), &status).await?;
    Ok(action)
}

fn push_failed(e: &crate::admin::AdminError) -> Desired {
    Desired::new(conditions::READY, false, "PushFailed", e.to_string())
}

/// Creates the credentials Secret. The pair was just issued and every earlier one revoked, so a
/// Secret of ours that appeared meanwhile (a previous leader's) must get this pair; a Secret of
/// that name that is not the project's is never touched.
async fn write_credentials(secrets: &Api<Secret>, project: &Project, secret: Secret) -> Result<(), Error> {
    let name = secret.name_any();
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_already_exists() => {
            let existing = secrets.get(&name).await?;
            let ours = existing.owner_references().iter().any(|o| Some(&o.uid) == project.metadata.uid.as_ref());
            if !ours {
                return Err(Error::BadSecret(name, "ownerReference to its Project"));
            }
            let replacement = Secret { metadata: existing.metadata, ..secret };
            secrets.replace(&name, &PostParams::default(), &replacement).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The Secret an application mounts: credentials plus where to send data.
fn credentials_secret(
    project: &Project,
    cluster: &SextantCluster,
    name: &str,
    credentials: crate::admin::ProjectCredentials,
) -> Result<Secret, Error> {
    let names = Names::of(cluster)?;
    let svc = &cluster.spec.routers.service;
    let owner = project.controller_owner_ref(&()).ok_or_else(|| Error::Waiting("project without uid".into()))?;
    let data = [
        ("project-id", credentials.project_id),
        ("ingest-token", credentials.ingest_token),
        ("api-key", credentials.api_key),
        ("endpoint", names.router_url(svc.http_port)),
        ("otlp-grpc-endpoint", format!("http://{}.{}.svc:{}", names.routers(), names.namespace, svc.otlp_grpc_port)),
    ];
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: project.namespace(),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/managed-by".to_owned(), "sextant-operator".to_owned()),
                ("sextant.dev/project".to_owned(), project.name_any()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some(data.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
        ..Secret::default()
    })
}

async fn cleanup_project(project: Arc<Project>, ctx: &Context) -> Result<Action, Error> {
    let ns = namespace(project.as_ref())?;
    let cluster = tenant_cluster(ctx, &ns, &project.spec.tenant).await?;
    let Cleanup::Delete { key } = tenancy::cleanup_keyed(project.as_ref(), "Project")? else {
        return Ok(Action::await_change());
    };
    match admin_in(ctx, &ns, cluster.as_deref()).await? {
        Some(admin) => {
            let result = deletion(admin.delete_project(&key).await?, "the project's data")?;
            ctx.event(project.as_ref(), false, "DataDeleted", "the project and all of its data were deleted".into())
                .await;
            Ok(result)
        }
        None => Ok(Action::await_change()),
    }
}

// ---- Plan (cluster-scoped: pushed to every cluster) ----

pub async fn reconcile_plan(plan: Arc<Plan>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented("plan", plan.clone(), ctx.clone(), async {
        let api: Api<Plan> = Api::all(ctx.client.clone());
        finalizer(&api, FINALIZER, plan.clone(), |event| async {
            let clusters = Api::<SextantCluster>::all(ctx.client.clone()).list(&ListParams::default()).await?.items;
            let live: Vec<_> = clusters.into_iter().filter(|c| c.metadata.deletion_timestamp.is_none()).collect();
            match event {
                Finalizer::Apply(p) => {
                    let req = tenancy::plan_plan(&p)?;
                    let previous = p.status.clone().unwrap_or_default();
                    let mut failure = None;
                    let d = if live.is_empty() {
                        Desired::new(conditions::READY, false, "NoCluster", "no SextantCluster to push the plan to")
                    } else {
                        let mut pushed = Ok(());
                        for cluster in &live {
                            pushed = ctx.admin_of(cluster).await?.upsert_plan(&p.name_any(), &req).await;
                            if pushed.is_err() {
                                break;
                            }
                        }
                        match pushed {
                            Ok(()) => Desired::new(
                                conditions::READY,
                                true,
                                "Synced",
                                format!("pushed to {} cluster(s)", live.len()),
                            ),
                            Err(e) => {
                                let d = push_failed(&e);
                                failure = Some(e);
                                d
                            }
                        }
                    };
                    let status = CommonStatus {
                        observed_generation: p.metadata.generation,
                        conditions: ready((ctx.clock)(), &previous.conditions, p.metadata.generation, d),
                    };
                    write_status(&api, &p, p.status.as_ref(), &status).await?;
                    if let Some(e) = failure {
                        return Err(e.into());
                    }
                    Ok(Action::requeue(if live.is_empty() { RETRY } else { RESYNC }))
                }
                Finalizer::Cleanup(p) => {
                    for cluster in &live {
                        if let Deletion::InProgress = ctx.admin_of(cluster).await?.delete_plan(&p.name_any()).await? {
                            return Err(Error::Waiting("the cluster is still deleting the plan".into()));
                        }
                    }
                    Ok(Action::await_change())
                }
            }
        })
        .await
        .map_err(finalizer_error)
    })
    .await
}

// ---- Quota and AlertRule: keyed objects that refer to a tenant or a project ----

async fn referent_tenant(ctx: &Context, ns: &str, name: &str) -> Result<(Option<Referent>, Option<String>), Error> {
    let t = Api::<Tenant>::namespaced(ctx.client.clone(), ns).get_opt(name).await?;
    let cluster = t.as_ref().and_then(|t| t.spec.cluster.clone());
    Ok((
        t.as_ref().and_then(|t| Referent::of(t, &t.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default())),
        cluster,
    ))
}

async fn referent_project(ctx: &Context, ns: &str, name: &str) -> Result<(Option<Referent>, Option<String>), Error> {
    let p = Api::<Project>::namespaced(ctx.client.clone(), ns).get_opt(name).await?;
    let referent =
        p.as_ref().and_then(|p| Referent::of(p, &p.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default()));
    let cluster = match &p {
        Some(p) => tenant_cluster(ctx, ns, &p.spec.tenant).await?,
        None => None,
    };
    Ok((referent, cluster))
}

pub async fn reconcile_quota(quota: Arc<Quota>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented("quota", quota.clone(), ctx.clone(), async {
        let ns = namespace(quota.as_ref())?;
        let api: Api<Quota> = Api::namespaced(ctx.client.clone(), &ns);
        finalizer(&api, FINALIZER, quota.clone(), |event| async {
            let (target, cluster) = match (&quota.spec.tenant, &quota.spec.project) {
                (Some(t), None) => referent_tenant(&ctx, &ns, t).await?,
                (None, Some(p)) => referent_project(&ctx, &ns, p).await?,
                _ => (None, None),
            };
            match event {
                Finalizer::Apply(q) => {
                    let previous = q.status.clone().unwrap_or_default();
                    let mut failure = None;
                    let (d, action) = match tenancy::plan_quota(&q, target.as_ref())? {
                        Apply::Wait(d) => (d, Action::requeue(RETRY)),
                        Apply::Push(req) => {
                            let admin = admin_in(&ctx, &ns, cluster.as_deref())
                                .await?
                                .ok_or_else(|| Error::Waiting(format!("no SextantCluster in namespace {ns}")))?;
                            match admin.upsert_quota(q.metadata.uid.as_deref().unwrap_or_default(), &req).await {
                                Ok(()) => (synced(), Action::requeue(RESYNC)),
                                Err(e) => {
                                    let d = push_failed(&e);
                                    failure = Some(e);
                                    (d, Action::await_change())
                                }
                            }
                        }
                    };
                    let status = CommonStatus {
                        observed_generation: q.metadata.generation,
                        conditions: ready((ctx.clock)(), &previous.conditions, q.metadata.generation, d),
                    };
                    write_status(&api, &q, q.status.as_ref(), &status).await?;
                    if let Some(e) = failure {
                        return Err(e.into());
                    }
                    Ok(action)
                }
                Finalizer::Cleanup(q) => {
                    let Cleanup::Delete { key } = tenancy::cleanup_keyed(q.as_ref(), "Quota")? else {
                        return Ok(Action::await_change());
                    };
                    match admin_in(&ctx, &ns, cluster.as_deref()).await? {
                        Some(admin) => deletion(admin.delete_quota(&key).await?, "the quota"),
                        None => Ok(Action::await_change()),
                    }
                }
            }
        })
        .await
        .map_err(finalizer_error)
    })
    .await
}

pub async fn reconcile_alert_rule(rule: Arc<AlertRule>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented("alertrule", rule.clone(), ctx.clone(), async {
        let ns = namespace(rule.as_ref())?;
        let api: Api<AlertRule> = Api::namespaced(ctx.client.clone(), &ns);
        finalizer(&api, FINALIZER, rule.clone(), |event| async {
            let (project, cluster) = referent_project(&ctx, &ns, &rule.spec.project).await?;
            match event {
                Finalizer::Apply(r) => {
                    let previous = r.status.clone().unwrap_or_default();
                    let mut status = AlertRuleStatus { observed_generation: r.metadata.generation, ..previous.clone() };
                    let mut failure = None;
                    let (d, action) = match tenancy::plan_alert_rule(&r, project.as_ref())? {
                        Apply::Wait(d) => (d, Action::requeue(RETRY)),
                        Apply::Push(req) => {
                            let admin = admin_in(&ctx, &ns, cluster.as_deref())
                                .await?
                                .ok_or_else(|| Error::Waiting(format!("no SextantCluster in namespace {ns}")))?;
                            match admin.upsert_alert_rule(r.metadata.uid.as_deref().unwrap_or_default(), &req).await {
                                Ok(created) => {
                                    status.rule_id = Some(created.id);
                                    (synced(), Action::requeue(RESYNC))
                                }
                                Err(e) => {
                                    let d = push_failed(&e);
                                    failure = Some(e);
                                    (d, Action::await_change())
                                }
                            }
                        }
                    };
                    status.conditions = ready((ctx.clock)(), &previous.conditions, r.metadata.generation, d);
                    write_status(&api, &r, r.status.as_ref(), &status).await?;
                    if let Some(e) = failure {
                        return Err(e.into());
                    }
                    Ok(action)
                }
                Finalizer::Cleanup(r) => {
                    let Cleanup::Delete { key } = tenancy::cleanup_keyed(r.as_ref(), "AlertRule")? else {
                        return Ok(Action::await_change());
                    };
                    match admin_in(&ctx, &ns, cluster.as_deref()).await? {
                        Some(admin) => deletion(admin.delete_alert_rule(&key).await?, "the alert rule"),
                        None => Ok(Action::await_change()),
                    }
                }
            }
        })
        .await
        .map_err(finalizer_error)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::Method;
    use kube::runtime::controller::Action;
    use serde_json::{json, Value};

    use super::super::mock::*;
    use crate::admin::fake::Call;
    use crate::topology::tests::cluster;
    use crate::v1alpha1::{Project, ProjectSpec};

    const NS: &str = "/apis/sextant.dev/v1alpha1/namespaces/telemetry";
    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/telemetry/events";

    fn project(finalized: bool, deleting: bool) -> Project {
        let mut p = Project::new("shop", ProjectSpec { tenant: "acme".into(), name: "Shop".into() });
        p.metadata.namespace = Some("telemetry".into());
        p.metadata.uid = Some("project-uid".into());
        p.metadata.generation = Some(1);
        if finalized {
            p.metadata.finalizers = Some(vec![super::FINALIZER.into()]);
        }
        if deleting {
            p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(fixed_now()));
        }
        p
    }

    fn tenant(ready: bool, deleting: bool) -> Value {
        let mut t = json!({
            "apiVersion": "sextant.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "namespace": "telemetry", "uid": "tenant-uid", "generation": 1,
                         "finalizers": [super::FINALIZER]},
            "spec": {"displayName": "Acme", "plan": "pro", "ownerEmail": "ops@acme.test"},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "reason": "Synced", "message": "", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
        });
        if deleting {
            t["metadata"]["deletionTimestamp"] = json!("2026-11-22T00:00:00Z");
        }
        t
    }

    fn clusters() -> Value {
        json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "SextantClusterList", "metadata": {},
               "items": [serde_json::to_value(cluster(3, 3)).unwrap()]})
    }

    fn internal_secret() -> Step {
        Step::get("/api/v1/namespaces/telemetry/secrets/obs-internal").reply(
            200,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "obs-internal"}, "data": {"admin-token": "dG9rZW4="}}),
        )
    }

    #[tokio::test]
    async fn new_project_first_gets_the_finalizer() {
        let p = project(false, false);
        let steps = vec![Step::new(Method::PATCH, &format!("{NS}/projects/shop")).expect_body(|b| {
            let ops = b.as_array().expect("a JSON patch");
            assert!(ops.iter().any(|op| op["op"] == "add" && op["value"] == json!([super::FINALIZER])), "{b}");
        })];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let action = mock
            .run(steps, serde_json::to_value(&p).unwrap(), super::reconcile_project(Arc::new(p), ctx))
            .await
            .unwrap();
        assert_eq!(action, Action::await_change());
        assert!(admin.calls().is_empty(), "nothing is pushed before the finalizer is in place");
    }

    #[tokio::test]
    async fn project_is_created_in_the_cluster_and_its_credentials_written_once() {
        let p = project(true, false);
        let steps = vec![
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get("/api/v1/namespaces/telemetry/secrets/shop-credentials").not_found(),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::POST, "/api/v1/namespaces/telemetry/secrets").expect_body(|b| {
                assert_eq!(b["metadata"]["name"], "shop-credentials");
                assert_eq!(b["stringData"]["api-key"], "sxk_0000000000000001_test");
                assert_eq!(b["stringData"]["ingest-token"], "sxp_test");
                assert_eq!(b["stringData"]["endpoint"], "http://obs-router.telemetry.svc:8080");
                assert_eq!(b["stringData"]["otlp-grpc-endpoint"], "http://obs-router.telemetry.svc:4317");
                assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "Project");
            }),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "CredentialsIssued")),
            Step::new(Method::PATCH, &format!("{NS}/projects/shop/status")).expect_body(|b| {
                assert_eq!(b["status"]["secretName"], "shop-credentials");
                assert_eq!(b["status"]["projectId"], "prj-project-uid");
                assert_eq!(b["status"]["conditions"][0]["type"], "Ready");
                assert_eq!(b["status"]["conditions"][0]["status"], "True");
                assert_eq!(b["status"]["conditions"][0]["observedGeneration"], 1);
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        mock.run(steps, serde_json::to_value(&p).unwrap(), super::reconcile_project(Arc::new(p), ctx)).await.unwrap();
        let calls = admin.calls();
        assert!(
            matches!(&calls[1], Call::UpsertProject(key, req) if key == "project-uid" && req.tenant_key == "tenant-uid" && req.managed_by.kind == "Project"),
            "{calls:?}"
        );
        assert_eq!(calls[2], Call::IssueCredentials("project-uid".into()));
    }

    #[tokio::test]
    async fn existing_secret_is_never_rotated() {
        let p = project(true, false);
        let steps = vec![
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get("/api/v1/namespaces/telemetry/secrets/shop-credentials")
                .reply(200, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-credentials"}})),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::PATCH, &format!("{NS}/projects/shop/status")),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        mock.run(steps, serde_json::to_value(&p).unwrap(), super::reconcile_project(Arc::new(p), ctx)).await.unwrap();
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::IssueCredentials(_))));
    }

    #[tokio::test]
    async fn project_waits_for_its_tenant_without_calling_the_cluster() {
        let p = project(true, false);
        let steps = vec![
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(false, false)),
            Step::new(Method::PATCH, &format!("{NS}/projects/shop/status")).expect_body(|b| {
                assert_eq!(b["status"]["conditions"][0]["reason"], "TenantNotReady");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let action = mock
            .run(steps, serde_json::to_value(&p).unwrap(), super::reconcile_project(Arc::new(p), ctx))
            .await
            .unwrap();
        assert_eq!(action, Action::requeue(super::RETRY));
        assert!(admin.calls().is_empty());
    }

    #[tokio::test]
    async fn deleting_a_project_deletes_its_data_then_releases_the_finalizer() {
        let p = project(true, true);
        let steps = vec![
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "DataDeleted")),
            Step::new(Method::PATCH, &format!("{NS}/projects/shop")).expect_body(|b| {
                let ops = b.as_array().expect("a JSON patch");
                assert!(ops.iter().any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"), "{b}");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        mock.run(steps, serde_json::to_value(&p).unwrap(), super::reconcile_project(Arc::new(p), ctx)).await.unwrap();
        assert!(admin.calls().contains(&Call::DeleteProject("project-uid".into())));
    }

    #[tokio::test]
    async fn cluster_refusing_the_delete_keeps_the_finalizer_and_backs_off() {
        let p = Arc::new(project(true, true));
        let steps = vec![
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::POST, EVENTS).expect_body(|b| {
                assert_eq!(b["reason"], "ReconcileFailed");
                assert_eq!(b["type"], "Warning");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        admin.unavailable.store(true, std::sync::atomic::Ordering::SeqCst);
        let err = mock.run(steps, json!({}), super::reconcile_project(p.clone(), ctx.clone())).await.unwrap_err();
        assert_eq!(super::super::error_policy(p, &err, ctx), Action::requeue(std::time::Duration::from_secs(5)));
    }

    #[tokio::test]
    async fn tenant_is_pushed_with_its_plan_and_reports_the_org() {
        let mut t: crate::v1alpha1::Tenant = serde_json::from_value(tenant(false, false)).unwrap();
        t.status = None;
        let plan = json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "Plan", "metadata": {"name": "pro"},
                          "spec": {"retentionDays": 30}});
        let no_projects =
            json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "ProjectList", "metadata": {}, "items": []});
        let steps = vec![
            Step::get("/apis/sextant.dev/v1alpha1/plans/pro").reply(200, plan),
            Step::get(&format!("{NS}/projects")).reply(200, no_projects),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::PATCH, &format!("{NS}/tenants/acme/status")).expect_body(|b| {
                assert_eq!(b["status"]["orgId"], "org-tenant-uid");
                assert_eq!(b["status"]["projects"], 0);
                assert_eq!(b["status"]["conditions"][0]["status"], "True");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let object = serde_json::to_value(&t).unwrap();
        let action = mock.run(steps, object, super::reconcile_tenant(Arc::new(t), ctx)).await.unwrap();
        assert_eq!(action, Action::requeue(super::RESYNC));
        assert!(
            matches!(&admin.calls()[1], Call::UpsertTenant(key, req) if key == "tenant-uid" && req.plan == "pro" && req.owner_email == "ops@acme.test")
        );
    }

    #[tokio::test]
    async fn tenant_with_an_unknown_plan_waits() {
        let t: crate::v1alpha1::Tenant = serde_json::from_value(tenant(false, false)).unwrap();
        let no_projects =
            json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "ProjectList", "metadata": {}, "items": []});
        let steps = vec![
            Step::get("/apis/sextant.dev/v1alpha1/plans/pro").not_found(),
            Step::get(&format!("{NS}/projects")).reply(200, no_projects),
            Step::new(Method::PATCH, &format!("{NS}/tenants/acme/status")).expect_body(|b| {
                assert_eq!(b["status"]["conditions"][0]["reason"], "PlanNotFound");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let object = serde_json::to_value(&t).unwrap();
        mock.run(steps, object, super::reconcile_tenant(Arc::new(t), ctx)).await.unwrap();
        assert!(admin.calls().is_empty());
    }

    #[tokio::test]
    async fn plans_are_pushed_to_every_cluster_and_marked_managed() {
        let spec: crate::v1alpha1::PlanSpec = serde_json::from_value(
            json!({"quotas": {"gbPerMonth": 10}, "retentionDays": 90, "features": ["retention"]}),
        )
        .unwrap();
        let mut plan = crate::v1alpha1::Plan::new("growth", spec);
        plan.metadata.uid = Some("plan-uid".into());
        plan.metadata.generation = Some(3);
        plan.metadata.finalizers = Some(vec![super::FINALIZER.into()]);
        let steps = vec![
            Step::get("/apis/sextant.dev/v1alpha1/sextantclusters").reply(200, clusters()),
            internal_secret(),
            Step::new(Method::PATCH, "/apis/sextant.dev/v1alpha1/plans/growth/status").expect_body(|b| {
                assert_eq!(b["status"]["observedGeneration"], 3);
                assert_eq!(b["status"]["conditions"][0]["reason"], "Synced");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let object = serde_json::to_value(&plan).unwrap();
        mock.run(steps, object, super::reconcile_plan(Arc::new(plan), ctx)).await.unwrap();
        let calls = admin.calls();
        assert!(
            matches!(&calls[1], Call::UpsertPlan(name, req) if name == "growth" && req.gb_per_month == Some(10)
                && req.events_per_month.is_none() && req.managed_by.kind == "Plan" && req.managed_by.namespace.is_none()),
            "{calls:?}"
        );
    }

    fn ready_project() -> Value {
        let mut p = serde_json::to_value(project(true, false)).unwrap();
        p["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Synced", "message": "",
                                              "lastTransitionTime": "2026-11-01T00:00:00Z"}]});
        p
    }

    #[tokio::test]
    async fn alert_rule_is_pushed_for_its_project_and_reports_the_rule_id() {
        let spec: crate::v1alpha1::AlertRuleSpec = serde_json::from_value(json!({
            "project": "shop", "metric": "error_rate", "comparison": ">=", "threshold": 0.05, "windowMinutes": 10,
            "filter": {"service": "checkout"}
        }))
        .unwrap();
        let mut rule = crate::v1alpha1::AlertRule::new("checkout-errors", spec);
        rule.metadata.namespace = Some("telemetry".into());
        rule.metadata.uid = Some("rule-uid".into());
        rule.metadata.generation = Some(1);
        rule.metadata.finalizers = Some(vec![super::FINALIZER.into()]);
        let steps = vec![
            Step::get(&format!("{NS}/projects/shop")).reply(200, ready_project()),
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::PATCH, &format!("{NS}/alertrules/checkout-errors/status")).expect_body(|b| {
                assert_eq!(b["status"]["ruleId"], "rule-rule-uid");
                assert_eq!(b["status"]["conditions"][0]["status"], "True");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let object = serde_json::to_value(&rule).unwrap();
        mock.run(steps, object, super::reconcile_alert_rule(Arc::new(rule), ctx)).await.unwrap();
        let calls = admin.calls();
        assert!(
            matches!(&calls[1], Call::UpsertAlertRule(key, req) if key == "rule-uid" && req.project_key == "project-uid"
                && req.window_minutes == 10 && req.name == "checkout-errors" && req.managed_by.kind == "AlertRule"),
            "{calls:?}"
        );
    }

    #[tokio::test]
    async fn a_refused_alert_rule_is_reported_and_retried() {
        let spec: crate::v1alpha1::AlertRuleSpec = serde_json::from_value(json!({
            "project": "shop", "metric": "log_count", "comparison": ">", "threshold": 100, "windowMinutes": 1
        }))
        .unwrap();
        let mut rule = crate::v1alpha1::AlertRule::new("noisy", spec);
        rule.metadata.namespace = Some("telemetry".into());
        rule.metadata.uid = Some("rule-uid".into());
        rule.metadata.finalizers = Some(vec![super::FINALIZER.into()]);
        let steps = vec![
            Step::get(&format!("{NS}/projects/shop")).reply(200, ready_project()),
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::PATCH, &format!("{NS}/alertrules/noisy/status"))
                .expect_body(|b| assert_eq!(b["status"]["conditions"][0]["reason"], "PushFailed")),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "ReconcileFailed")),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        admin.unavailable.store(true, std::sync::atomic::Ordering::SeqCst);
        let rule = Arc::new(rule);
        let err = mock
            .run(
                steps,
                serde_json::to_value(rule.as_ref()).unwrap(),
                super::reconcile_alert_rule(rule.clone(), ctx.clone()),
            )
            .await
            .unwrap_err();
        assert_eq!(super::super::error_policy(rule, &err, ctx), Action::requeue(std::time::Duration::from_secs(5)));
    }

    #[tokio::test]
    async fn quota_for_a_missing_project_waits() {
        let spec: crate::v1alpha1::QuotaSpec =
            serde_json::from_value(json!({"project": "nope", "gbPerMonth": 1})).unwrap();
        let mut quota = crate::v1alpha1::Quota::new("q", spec);
        quota.metadata.namespace = Some("telemetry".into());
        quota.metadata.uid = Some("quota-uid".into());
        quota.metadata.finalizers = Some(vec![super::FINALIZER.into()]);
        let steps = vec![
            Step::get(&format!("{NS}/projects/nope")).not_found(),
            Step::new(Method::PATCH, &format!("{NS}/quotas/q/status"))
                .expect_body(|b| assert_eq!(b["status"]["conditions"][0]["reason"], "TargetNotReady")),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let object = serde_json::to_value(&quota).unwrap();
        let action = mock.run(steps, object, super::reconcile_quota(Arc::new(quota), ctx)).await.unwrap();
        assert_eq!(action, Action::requeue(super::RETRY));
        assert!(admin.calls().is_empty());
    }

    #[tokio::test]
    async fn an_unreachable_cluster_is_reported_in_the_tenant_status() {
        let t: crate::v1alpha1::Tenant = serde_json::from_value(tenant(false, false)).unwrap();
        let plan = json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "Plan", "metadata": {"name": "pro"}, "spec": {"retentionDays": 30}});
        let no_projects =
            json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "ProjectList", "metadata": {}, "items": []});
        let steps = vec![
            Step::get("/apis/sextant.dev/v1alpha1/plans/pro").reply(200, plan),
            Step::get(&format!("{NS}/projects")).reply(200, no_projects),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::PATCH, &format!("{NS}/tenants/acme/status")).expect_body(|b| {
                let c = &b["status"]["conditions"][0];
                assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("PushFailed")));
                assert!(c["message"].as_str().unwrap().contains("503"), "{c}");
            }),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "ReconcileFailed")),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        admin.unavailable.store(true, std::sync::atomic::Ordering::SeqCst);
        let object = serde_json::to_value(&t).unwrap();
        let err = mock.run(steps, object, super::reconcile_tenant(Arc::new(t), ctx)).await.unwrap_err();
        assert!(matches!(err, super::Error::Finalizer(_)), "{err}");
    }

    fn project_steps_until_secret_create() -> Vec<Step> {
        vec![
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get("/api/v1/namespaces/telemetry/secrets/shop-credentials").not_found(),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::POST, "/api/v1/namespaces/telemetry/secrets").reply(
                409,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409, "message": "exists"}),
            ),
        ]
    }

    #[tokio::test]
    async fn a_secret_of_ours_that_appeared_meanwhile_gets_the_fresh_credentials() {
        let p = project(true, false);
        let mut steps = project_steps_until_secret_create();
        steps.push(Step::get("/api/v1/namespaces/telemetry/secrets/shop-credentials").reply(
            200,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-credentials", "resourceVersion": "7",
                   "ownerReferences": [{"apiVersion": "sextant.dev/v1alpha1", "kind": "Project", "name": "shop", "uid": "project-uid"}]},
                   "stringData": {"api-key": "sxk_revoked"}}),
        ));
        steps.push(Step::new(Method::PUT, "/api/v1/namespaces/telemetry/secrets/shop-credentials").expect_body(|b| {
            assert_eq!(b["stringData"]["api-key"], "sxk_0000000000000001_test");
            assert_eq!(b["metadata"]["resourceVersion"], "7", "replaces exactly the version read");
        }));
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "CredentialsIssued")));
        steps.push(Step::new(Method::PATCH, &format!("{NS}/projects/shop/status")));
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        mock.run(steps, serde_json::to_value(&p).unwrap(), super::reconcile_project(Arc::new(p), ctx)).await.unwrap();
    }

    #[tokio::test]
    async fn a_foreign_secret_with_the_credentials_name_is_left_alone() {
        let p = project(true, false);
        let mut steps = project_steps_until_secret_create();
        steps.push(
            Step::get("/api/v1/namespaces/telemetry/secrets/shop-credentials")
                .reply(200, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-credentials"}})),
        );
        steps.push(Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "ReconcileFailed")));
        let mock = Mock::new();
        let ctx = mock.ctx.clone();
        let err = mock.run(steps, json!({}), super::reconcile_project(Arc::new(p), ctx)).await.unwrap_err();
        assert!(err.to_string().contains("shop-credentials"), "{err}");
    }

    #[tokio::test]
    async fn deleting_a_tenant_waits_for_its_projects() {
        let t: crate::v1alpha1::Tenant = serde_json::from_value(tenant(true, true)).unwrap();
        let t = Arc::new(t);
        let projects = json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "ProjectList", "metadata": {},
                              "items": [serde_json::to_value(project(true, false)).unwrap()]});
        let steps = vec![
            Step::get(&format!("{NS}/projects")).reply(200, projects),
            Step::new(Method::POST, EVENTS).expect_body(|b| assert_eq!(b["reason"], "WaitingForProjects")),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let err = mock.run(steps, json!({}), super::reconcile_tenant(t.clone(), ctx.clone())).await.unwrap_err();
        assert!(err.to_string().contains("shop"), "{err}");
        assert_eq!(super::super::error_policy(t, &err, ctx), Action::requeue(std::time::Duration::from_secs(15)));
        assert!(admin.calls().is_empty(), "the tenant is not deleted while projects remain");
    }
}

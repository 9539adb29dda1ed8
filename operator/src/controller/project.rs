//! Project → a project in the cluster plus a credentials Secret written once. Deleting a
//! Project deletes the project and all of its data in the cluster before the finalizer goes.

use std::sync::Arc;

use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::ResourceExt;

use super::pushed::{
    admin_in, deletion, finalizer_error, namespace, push_failed, ready, synced, tenant_cluster, RESYNC, RETRY,
};
use super::{instrumented, write_status, Context, Error};
use crate::tenancy::{self, Apply, Cleanup, FINALIZER};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use crate::tenancy::Referent;
use crate::topology::Names;
use crate::v1alpha1::{Project, ProjectStatus, SextantCluster, Tenant};

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
    let tls = cluster.spec.tls.is_some();
    let owner = project.controller_owner_ref(&()).ok_or_else(|| Error::Waiting("project without uid".into()))?;
    let data = [
        ("project-id", credentials.project_id),
        ("ingest-token", credentials.ingest_token),
        ("api-key", credentials.api_key),
        ("endpoint", names.router_url(svc.http_port, tls)),
        // OTLP exporters: gRPC, and HTTP (the exporter appends /v1/traces and the others).
        ("otlp-grpc-endpoint", names.router_otlp_grpc_url(svc.otlp_grpc_port, tls)),
        ("otlp-http-endpoint", names.router_url(svc.http_port, tls)),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::Method;
    use kube::runtime::controller::Action;
    use serde_json::json;

    use crate::admin::fake::Call;
    use crate::controller::error_policy;
    use crate::controller::mock::*;
    use crate::controller::pushed::fixtures::*;
    use crate::controller::pushed::RETRY;
    use crate::tenancy::FINALIZER;

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
    async fn new_project_first_gets_the_finalizer() {
        let p = project(false, false);
        let steps = vec![Step::new(Method::PATCH, &format!("{NS}/projects/shop")).expect_body(|b| {
            let ops = b.as_array().expect("a JSON patch");
            assert!(ops.iter().any(|op| op["op"] == "add" && op["value"] == json!([FINALIZER])), "{b}");
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
                assert_eq!(b["stringData"]["otlp-http-endpoint"], "http://obs-router.telemetry.svc:8080");
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
        assert_eq!(action, Action::requeue(RETRY));
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
        assert_eq!(error_policy(p, &err, ctx), Action::requeue(std::time::Duration::from_secs(5)));
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
}

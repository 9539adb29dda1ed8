//! Tenant → an organization in the cluster (through its admin API). A tenant being deleted
//! waits for its projects, then is deleted in the cluster before the finalizer goes.

use std::sync::Arc;

use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::ResourceExt;

use super::pushed::{admin_in, deletion, finalizer_error, namespace, push_target, ready, Outcome};
use super::{instrumented, write_status, Context, Error};
use crate::tenancy::{self, Apply, Cleanup, FINALIZER};
use crate::v1alpha1::{Plan, Project, Tenant, TenantStatus};

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
    let outcome = match tenancy::plan_tenant(&tenant, plan_exists)? {
        Apply::Wait(d) => Outcome::wait(d),
        Apply::Push(req) => {
            let admin = push_target(ctx, &ns, tenant.spec.cluster.as_deref()).await?;
            let key = tenant.metadata.uid.clone().unwrap_or_default();
            Outcome::of(admin.upsert_tenant(&key, &req).await, |org| status.org_id = Some(org.org_id))
        }
    };
    status.conditions = ready(now, &previous.conditions, tenant.metadata.generation, outcome.ready.clone());
    write_status(api, &tenant, tenant.status.as_ref(), &status).await?;
    outcome.finish()
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
    use crate::controller::pushed::RESYNC;

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
        assert_eq!(action, Action::requeue(RESYNC));
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
        assert_eq!(error_policy(t, &err, ctx), Action::requeue(std::time::Duration::from_secs(15)));
        assert!(admin.calls().is_empty(), "the tenant is not deleted while projects remain");
    }
}

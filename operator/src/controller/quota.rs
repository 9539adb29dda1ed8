//! Quota → a quota of a tenant or a project in the cluster.

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::ResourceExt;

use super::pushed::{
    delete_keyed, finalizer_error, namespace, push_target, ready, referent_project, referent_tenant, Outcome,
};
use super::{instrumented, write_status, Context, Error};
use crate::tenancy::{self, Apply, FINALIZER};
use crate::v1alpha1::{Quota, QuotaStatus};

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
                    let mut usage = previous.usage.clone();
                    let outcome = match tenancy::plan_quota(&q, target.as_ref())? {
                        Apply::Wait(d) => Outcome::wait(d),
                        Apply::Push(req) => {
                            let admin = push_target(&ctx, &ns, cluster.as_deref()).await?;
                            let key = q.metadata.uid.as_deref().unwrap_or_default();
                            let outcome = Outcome::of(admin.upsert_quota(key, &req).await, drop);
                            let now = (ctx.clock)();
                            if outcome.pushed() && tenancy::usage_due(usage.as_ref().map(|u| &u.observed_at), now) {
                                // Not worth failing the reconcile over: the last reading stays.
                                match admin.quota_usage(key).await {
                                    Ok(u) => usage = Some(tenancy::quota_usage_status(&u, now)),
                                    Err(e) => tracing::warn!(quota = %q.name_any(), error = %e, "reading its usage"),
                                }
                            }
                            outcome.again_after(tenancy::USAGE_REFRESH)
                        }
                    };
                    let status = QuotaStatus {
                        observed_generation: q.metadata.generation,
                        conditions: ready(
                            (ctx.clock)(),
                            &previous.conditions,
                            q.metadata.generation,
                            outcome.ready.clone(),
                        ),
                        usage,
                    };
                    write_status(&api, &q, q.status.as_ref(), &status).await?;
                    outcome.finish()
                }
                Finalizer::Cleanup(q) => {
                    delete_keyed(&ctx, &ns, cluster.as_deref(), q.as_ref(), "Quota", "the quota", |admin, key| {
                        admin.delete_quota(key)
                    })
                    .await
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
    use serde_json::json;

    use crate::controller::mock::*;
    use crate::controller::pushed::fixtures::*;
    use crate::controller::pushed::RETRY;
    use crate::tenancy::FINALIZER;

    use crate::admin::fake::Call;
    use crate::admin::QuotaUsage;
    use crate::controller::pushed::{ready, synced};
    use crate::tenancy::USAGE_REFRESH;
    use crate::v1alpha1::{Quota, QuotaSpec, QuotaStatus, QuotaUsageStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn tenant_quota(status: Option<QuotaStatus>) -> Quota {
        let spec: QuotaSpec =
            serde_json::from_value(json!({"tenant": "acme", "bytesPerMonth": 2000, "enforcement": "Hard"})).unwrap();
        let mut quota = Quota::new("q", spec);
        quota.metadata.namespace = Some("telemetry".into());
        quota.metadata.uid = Some("quota-uid".into());
        quota.metadata.generation = Some(1);
        quota.metadata.finalizers = Some(vec![FINALIZER.into()]);
        quota.status = status;
        quota
    }

    fn pushing() -> Vec<Step> {
        vec![
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
        ]
    }

    #[tokio::test]
    async fn a_pushed_quota_shows_its_usage_against_its_limit_and_looks_again_in_a_minute() {
        let quota = tenant_quota(None);
        let mut steps = pushing();
        steps.push(Step::new(Method::PATCH, &format!("{NS}/quotas/q/status")).expect_body(|b| {
            assert_eq!(b["status"]["conditions"][0]["reason"], "Synced");
            assert_eq!(
                b["status"]["usage"],
                json!({"period": "2026-11", "usedBytes": 1500, "limitBytes": 2000, "usedEvents": 7,
                       "percentage": 75, "observedAt": "2026-11-18T11:06:40Z"})
            );
        }));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        *admin.quota_usage.lock().unwrap() = Some(QuotaUsage {
            period: "2026-11".into(),
            period_start: "2026-11-01T00:00:00.000Z".into(),
            period_end: "2026-12-01T00:00:00.000Z".into(),
            used_bytes: 1500,
            limit_bytes: Some(2000),
            used_events: 7,
            limit_events: None,
        });
        let object = serde_json::to_value(&quota).unwrap();
        let action = mock.run(steps, object, super::reconcile_quota(Arc::new(quota), ctx)).await.unwrap();
        assert_eq!(action, Action::requeue(USAGE_REFRESH));
        let calls = admin.calls();
        assert!(
            matches!(&calls[1], Call::UpsertQuota(k, req) if k == "quota-uid" && req.bytes_per_month == Some(2000))
        );
        assert_eq!(calls[2], Call::QuotaUsage("quota-uid".into()));
    }

    #[tokio::test]
    async fn usage_read_within_the_minute_is_neither_read_again_nor_rewritten() {
        let half_a_minute_ago = Time(fixed_now() - std::time::Duration::from_secs(30));
        let status = QuotaStatus {
            observed_generation: Some(1),
            conditions: ready(fixed_now(), &[], Some(1), synced()),
            usage: Some(QuotaUsageStatus {
                period: "2026-11".into(),
                used_bytes: 10,
                limit_bytes: Some(2000),
                used_events: 0,
                limit_events: None,
                percentage: Some(0),
                observed_at: half_a_minute_ago,
            }),
        };
        let quota = tenant_quota(Some(status));
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let object = serde_json::to_value(&quota).unwrap();
        let action = mock.run(pushing(), object, super::reconcile_quota(Arc::new(quota), ctx)).await.unwrap();
        assert_eq!(action, Action::requeue(USAGE_REFRESH));
        assert!(!admin.calls().iter().any(|c| matches!(c, Call::QuotaUsage(_))), "{:?}", admin.calls());
    }

    #[tokio::test]
    async fn quota_for_a_missing_project_waits() {
        let spec: crate::v1alpha1::QuotaSpec =
            serde_json::from_value(json!({"project": "nope", "gbPerMonth": 1})).unwrap();
        let mut quota = crate::v1alpha1::Quota::new("q", spec);
        quota.metadata.namespace = Some("telemetry".into());
        quota.metadata.uid = Some("quota-uid".into());
        quota.metadata.finalizers = Some(vec![FINALIZER.into()]);
        let steps = vec![
            Step::get(&format!("{NS}/projects/nope")).not_found(),
            Step::new(Method::PATCH, &format!("{NS}/quotas/q/status"))
                .expect_body(|b| assert_eq!(b["status"]["conditions"][0]["reason"], "TargetNotReady")),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let object = serde_json::to_value(&quota).unwrap();
        let action = mock.run(steps, object, super::reconcile_quota(Arc::new(quota), ctx)).await.unwrap();
        assert_eq!(action, Action::requeue(RETRY));
        assert!(admin.calls().is_empty());
    }
}

//! Quota → a quota of a tenant or a project in the cluster.

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};

use super::pushed::{
    delete_keyed, finalizer_error, namespace, push_target, ready, referent_project, referent_tenant, Outcome,
};
use super::{instrumented, write_status, Context, Error};
use crate::tenancy::{self, Apply, FINALIZER};
use crate::v1alpha1::{CommonStatus, Quota};

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
                    let outcome = match tenancy::plan_quota(&q, target.as_ref())? {
                        Apply::Wait(d) => Outcome::wait(d),
                        Apply::Push(req) => {
                            let admin = push_target(&ctx, &ns, cluster.as_deref()).await?;
                            Outcome::of(
                                admin.upsert_quota(q.metadata.uid.as_deref().unwrap_or_default(), &req).await,
                                drop,
                            )
                        }
                    };
                    let status = CommonStatus {
                        observed_generation: q.metadata.generation,
                        conditions: ready(
                            (ctx.clock)(),
                            &previous.conditions,
                            q.metadata.generation,
                            outcome.ready.clone(),
                        ),
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

//! Plan (cluster-scoped) → the plan catalog of every SextantCluster.

use std::sync::Arc;

use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::ResourceExt;

use super::pushed::{finalizer_error, push_failed, ready, RESYNC, RETRY};
use super::{instrumented, write_status, Context, Error};
use crate::admin::Deletion;
use crate::conditions::{self, Desired};
use crate::tenancy::{self, FINALIZER};
use crate::v1alpha1::{Plan, PlanStatus, SextantCluster};

pub async fn reconcile_plan(plan: Arc<Plan>, ctx: Arc<Context>) -> Result<Action, Error> {
    instrumented("plan", plan.clone(), ctx.clone(), async {
        let api: Api<Plan> = Api::all(ctx.client.clone());
        finalizer(&api, FINALIZER, plan.clone(), |event| async {
            let mut clusters = Vec::new();
            for api in ctx.scoped_apis::<SextantCluster>() {
                clusters.extend(api.list(&ListParams::default()).await?.items);
            }
            let live: Vec<_> = clusters.into_iter().filter(|c| c.metadata.deletion_timestamp.is_none()).collect();
            match event {
                Finalizer::Apply(p) => {
                    let req = tenancy::plan_plan(&p)?;
                    let previous = p.status.clone().unwrap_or_default();
                    let mut usage = previous.usage.clone();
                    let now = (ctx.clock)();
                    let read_usage = tenancy::usage_due(usage.as_ref().map(|u| &u.observed_at), now);
                    let mut failure = None;
                    let d = if live.is_empty() {
                        Desired::new(conditions::READY, false, "NoCluster", "no SextantCluster to push the plan to")
                    } else {
                        let mut pushed = Ok(());
                        let mut answers = Vec::new();
                        for cluster in &live {
                            let admin = ctx.admin_of(cluster).await?;
                            pushed = admin.upsert_plan(&p.name_any(), &req).await;
                            if pushed.is_err() {
                                break;
                            }
                            if read_usage {
                                answers.push(admin.plan_usage(&p.name_any()).await);
                            }
                        }
                        // All clusters or none: a partial sum would read as a drop.
                        match answers.into_iter().collect::<Result<Vec<_>, _>>() {
                            Ok(answers) => usage = tenancy::plan_usage_status(&answers, now).or(usage),
                            Err(e) => tracing::warn!(plan = %p.name_any(), error = %e, "reading its usage"),
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
                    let status = PlanStatus {
                        observed_generation: p.metadata.generation,
                        conditions: ready(now, &previous.conditions, p.metadata.generation, d),
                        usage,
                    };
                    write_status(&api, &p, p.status.as_ref(), &status).await?;
                    if let Some(e) = failure {
                        return Err(e.into());
                    }
                    Ok(Action::requeue(if live.is_empty() { RETRY } else { tenancy::USAGE_REFRESH.min(RESYNC) }))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::Method;

    use serde_json::json;

    use crate::admin::fake::Call;

    use crate::controller::mock::*;
    use crate::controller::pushed::fixtures::*;

    use crate::tenancy::FINALIZER;

    #[tokio::test]
    async fn plans_are_pushed_to_every_cluster_and_marked_managed() {
        let spec: crate::v1alpha1::PlanSpec = serde_json::from_value(
            json!({"quotas": {"gbPerMonth": 10}, "retentionDays": 90, "features": ["retention"]}),
        )
        .unwrap();
        let mut plan = crate::v1alpha1::Plan::new("growth", spec);
        plan.metadata.uid = Some("plan-uid".into());
        plan.metadata.generation = Some(3);
        plan.metadata.finalizers = Some(vec![FINALIZER.into()]);
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
}

//! AlertRule → an alert rule of a project in the cluster.

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};

use super::pushed::{delete_keyed, finalizer_error, namespace, push_target, ready, referent_project, Outcome};
use super::{instrumented, write_status, Context, Error};
use crate::tenancy::{self, Apply, FINALIZER};
use crate::v1alpha1::{AlertRule, AlertRuleStatus};

/// How often a synced rule's state is copied into its status.
const STATE_REFRESH: Duration = Duration::from_secs(30);

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
                    let outcome = match tenancy::plan_alert_rule(&r, project.as_ref())? {
                        Apply::Wait(d) => Outcome::wait(d),
                        Apply::Push(req) => {
                            let admin = push_target(&ctx, &ns, cluster.as_deref()).await?;
                            let pushed =
                                admin.upsert_alert_rule(r.metadata.uid.as_deref().unwrap_or_default(), &req).await;
                            // The rule's state changes without the resource changing.
                            Outcome::of(pushed, |created| {
                                status.rule_id = Some(created.id);
                                status.state = created.state;
                                status.last_value = created.last_value;
                                status.last_transition_time = created.last_transition_at;
                            })
                            .again_after(STATE_REFRESH)
                        }
                    };
                    status.conditions =
                        ready((ctx.clock)(), &previous.conditions, r.metadata.generation, outcome.ready.clone());
                    write_status(&api, &r, r.status.as_ref(), &status).await?;
                    outcome.finish()
                }
                Finalizer::Cleanup(r) => {
                    let what = "the alert rule";
                    delete_keyed(&ctx, &ns, cluster.as_deref(), r.as_ref(), "AlertRule", what, |admin, key| {
                        admin.delete_alert_rule(key)
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

    use crate::admin::fake::Call;
    use crate::controller::error_policy;
    use crate::controller::mock::*;
    use crate::controller::pushed::fixtures::*;

    use crate::tenancy::FINALIZER;

    #[tokio::test]
    async fn alert_rule_is_pushed_for_its_project_and_reports_the_rule_id() {
        let spec: crate::v1alpha1::AlertRuleSpec = serde_json::from_value(json!({
            "project": "shop", "metric": "error_rate", "comparison": ">=", "threshold": 0.05, "windowMinutes": 10,
            "filter": {"service": "checkout"}, "forSeconds": 120, "notify": {"webhookId": "wh1"}
        }))
        .unwrap();
        let mut rule = crate::v1alpha1::AlertRule::new("checkout-errors", spec);
        rule.metadata.namespace = Some("telemetry".into());
        rule.metadata.uid = Some("rule-uid".into());
        rule.metadata.generation = Some(1);
        rule.metadata.finalizers = Some(vec![FINALIZER.into()]);
        let steps = vec![
            Step::get(&format!("{NS}/projects/shop")).reply(200, ready_project()),
            Step::get(&format!("{NS}/tenants/acme")).reply(200, tenant(true, false)),
            Step::get(&format!("{NS}/sextantclusters")).reply(200, clusters()),
            internal_secret(),
            Step::new(Method::PATCH, &format!("{NS}/alertrules/checkout-errors/status")).expect_body(|b| {
                assert_eq!(b["status"]["ruleId"], "rule-rule-uid");
                assert_eq!(b["status"]["conditions"][0]["status"], "True");
                assert_eq!(b["status"]["state"], "firing");
                assert_eq!(b["status"]["lastValue"], 0.25);
                assert_eq!(b["status"]["lastTransitionTime"], "2026-11-26T10:00:00.000Z");
            }),
        ];
        let mock = Mock::new();
        let (ctx, admin) = (mock.ctx.clone(), mock.admin.clone());
        let object = serde_json::to_value(&rule).unwrap();
        let action = mock.run(steps, object, super::reconcile_alert_rule(Arc::new(rule), ctx)).await.unwrap();
        assert_eq!(action, Action::requeue(super::STATE_REFRESH), "the state is refreshed without a change");
        let calls = admin.calls();
        assert!(
            matches!(&calls[1], Call::UpsertAlertRule(key, req) if key == "rule-uid" && req.project_key == "project-uid"
                && req.window_minutes == 10 && req.name == "checkout-errors" && req.managed_by.kind == "AlertRule"
                && req.for_seconds == 120 && req.webhook_id.as_deref() == Some("wh1")),
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
        rule.metadata.finalizers = Some(vec![FINALIZER.into()]);
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
        assert_eq!(error_policy(rule, &err, ctx), Action::requeue(std::time::Duration::from_secs(5)));
    }
}

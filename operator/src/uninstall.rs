//! `sextant operator --uninstall`: what the chart's pre-delete hook Job runs while the operator
//! still does. It deletes the release's Plans (and, when asked, every Tenant, Project, Quota and
//! AlertRule), waits a bounded time for the operator's finalizer (`sextant.dev/cleanup`) to
//! clean up in the cluster, then removes that finalizer from whatever is left, so neither
//! `helm uninstall` nor a later namespace deletion can wait forever on an operator that is gone.

use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::tenancy::FINALIZER;
use crate::v1alpha1::{AlertRule, Plan, Project, Quota, Tenant};

/// `--uninstall` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct UninstallArgs {
    /// Delete the sextant.dev resources below, wait, release what is left, and exit.
    #[arg(long)]
    pub uninstall: bool,
    /// Label selector of the Plans to delete (the chart's: `app.kubernetes.io/instance=RELEASE`).
    #[arg(long, requires = "uninstall")]
    pub uninstall_plans: Option<String>,
    /// Also delete every Tenant, Project, Quota and AlertRule in every namespace, with the
    /// projects' data in the cluster.
    #[arg(long, requires = "uninstall")]
    pub uninstall_tenancy: bool,
    /// How long the operator gets to clean up before finalizers are removed.
    #[arg(long, default_value_t = 120, requires = "uninstall")]
    pub uninstall_timeout_seconds: u64,
}

/// What happened to the resources of one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub kind: String,
    pub deleted: usize,
    /// Still there at the deadline: their finalizer was removed without the operator's cleanup.
    pub released: Vec<String>,
}

/// One kind to delete: its API resource and which of its objects.
struct Target {
    resource: ApiResource,
    namespaced: bool,
    selector: Option<String>,
}

impl Target {
    fn of<K: Resource<DynamicType = ()>>(namespaced: bool, selector: Option<String>) -> Self {
        Self { resource: ApiResource::erase::<K>(&()), namespaced, selector }
    }

    fn api(&self, client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if self.namespaced => Api::namespaced_with(client.clone(), ns, &self.resource),
            _ => Api::all_with(client.clone(), &self.resource),
        }
    }

    async fn list(&self, client: &Client) -> Result<Vec<DynamicObject>, kube::Error> {
        let params = match &self.selector {
            Some(s) => ListParams::default().labels(s),
            None => ListParams::default(),
        };
        Ok(self.api(client, None).list(&params).await?.items)
    }
}

fn targets(args: &UninstallArgs) -> Vec<Target> {
    let mut out = vec![];
    if args.uninstall_tenancy {
        // Dependents first; a Tenant waits for its Projects anyway.
        out.push(Target::of::<AlertRule>(true, None));
        out.push(Target::of::<Quota>(true, None));
        out.push(Target::of::<Project>(true, None));
        out.push(Target::of::<Tenant>(true, None));
    }
    if let Some(selector) = &args.uninstall_plans {
        out.push(Target::of::<Plan>(false, Some(selector.clone())));
    }
    out
}

/// Deletes, waits up to `--uninstall-timeout-seconds` (looking every `poll`), then releases.
pub async fn run(client: &Client, args: &UninstallArgs, poll: Duration) -> Result<Vec<Outcome>, kube::Error> {
    let targets = targets(args);
    let mut outcomes = vec![];
    for target in &targets {
        let objects = target.list(client).await?;
        for o in objects.iter().filter(|o| o.metadata.deletion_timestamp.is_none()) {
            match target.api(client, o.namespace().as_deref()).delete(&o.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        outcomes.push(Outcome { kind: target.resource.kind.clone(), deleted: objects.len(), released: vec![] });
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.uninstall_timeout_seconds);
    for (target, outcome) in targets.iter().zip(outcomes.iter_mut()) {
        loop {
            let left = target.list(client).await?;
            if left.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                for o in left {
                    let namespace = o.namespace();
                    let finalizers: Vec<String> = o.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
                    let patch = json!({"metadata": {"finalizers": finalizers}});
                    let api = target.api(client, namespace.as_deref());
                    match api.patch(&o.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.is_not_found() => continue,
                        Err(e) => return Err(e),
                    }
                    outcome.released.push(namespace.map_or(o.name_any(), |ns| format!("{ns}/{}", o.name_any())));
                }
                break;
            }
            tokio::time::sleep(poll).await;
        }
        if outcome.released.is_empty() {
            tracing::info!(kind = %outcome.kind, deleted = outcome.deleted, "deleted and cleaned up");
        } else {
            tracing::warn!(kind = %outcome.kind, released = ?outcome.released, "finalizer removed without cleanup");
        }
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::{json, Value};

    use super::*;
    use crate::controller::mock::{Mock, Step};

    const PLANS: &str = "/apis/sextant.dev/v1alpha1/plans";
    const PROJECTS: &str = "/apis/sextant.dev/v1alpha1/projects";

    fn list(kind: &str, items: Vec<Value>) -> Value {
        json!({"apiVersion": "sextant.dev/v1alpha1", "kind": format!("{kind}List"), "metadata": {}, "items": items})
    }

    fn plan(name: &str, deleting: bool) -> Value {
        let mut p = json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "Plan",
                           "metadata": {"name": name, "finalizers": ["sextant.dev/cleanup", "example.com/other"]},
                           "spec": {"displayName": name, "retentionDays": 7}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-11-26T18:00:00Z");
        }
        p
    }

    fn args(tenancy: bool, timeout: u64) -> UninstallArgs {
        UninstallArgs {
            uninstall: true,
            uninstall_plans: Some("app.kubernetes.io/instance=sextant".into()),
            uninstall_tenancy: tenancy,
            uninstall_timeout_seconds: timeout,
        }
    }

    fn deleted() -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})
    }

    #[tokio::test]
    async fn the_release_plans_are_deleted_and_waited_for() {
        let steps = vec![
            Step::get(PLANS).reply(200, list("Plan", vec![plan("free", false), plan("pro", false)])),
            Step::new(Method::DELETE, &format!("{PLANS}/free")).reply(200, deleted()),
            // Deleted meanwhile: fine.
            Step::new(Method::DELETE, &format!("{PLANS}/pro")).not_found(),
            // The operator is still cleaning up one of them, then none is left.
            Step::get(PLANS).reply(200, list("Plan", vec![plan("free", true)])),
            Step::get(PLANS).reply(200, list("Plan", vec![])),
        ];
        let mock = Mock::new().with_rbac("uninstall.yaml");
        let client = mock.ctx.client.clone();
        let out = mock
            .run(steps, json!({}), async move { run(&client, &args(false, 60), Duration::ZERO).await })
            .await
            .unwrap();
        assert_eq!(out, vec![Outcome { kind: "Plan".into(), deleted: 2, released: vec![] }]);
    }

    #[tokio::test]
    async fn what_is_left_at_the_deadline_loses_only_our_finalizer() {
        let project = json!({"apiVersion": "sextant.dev/v1alpha1", "kind": "Project",
            "metadata": {"name": "checkout", "namespace": "telemetry", "finalizers": ["sextant.dev/cleanup"],
                         "deletionTimestamp": "2026-11-26T18:00:00Z"},
            "spec": {"tenant": "acme", "name": "Checkout"}});
        let mut steps = vec![];
        for kind in ["alertrules", "quotas"] {
            steps.push(Step::get(&format!("/apis/sextant.dev/v1alpha1/{kind}")).reply(200, list("X", vec![])));
        }
        // Already being deleted (by kubectl, or a namespace deletion): not deleted again.
        steps.push(Step::get(PROJECTS).reply(200, list("Project", vec![project.clone()])));
        steps.push(Step::get("/apis/sextant.dev/v1alpha1/tenants").reply(200, list("Tenant", vec![])));
        steps.push(Step::get(PLANS).reply(200, list("Plan", vec![plan("free", false)])));
        steps.push(Step::new(Method::DELETE, &format!("{PLANS}/free")).reply(200, deleted()));
        // Timeout 0: the first look is at the deadline.
        steps.push(Step::get("/apis/sextant.dev/v1alpha1/alertrules").reply(200, list("X", vec![])));
        steps.push(Step::get("/apis/sextant.dev/v1alpha1/quotas").reply(200, list("X", vec![])));
        steps.push(Step::get(PROJECTS).reply(200, list("Project", vec![project.clone()])));
        steps.push(
            Step::new(Method::PATCH, "/apis/sextant.dev/v1alpha1/namespaces/telemetry/projects/checkout")
                .expect_body(|b| assert_eq!(b, &json!({"metadata": {"finalizers": []}})))
                .reply(200, project),
        );
        steps.push(Step::get("/apis/sextant.dev/v1alpha1/tenants").reply(200, list("Tenant", vec![])));
        steps.push(Step::get(PLANS).reply(200, list("Plan", vec![plan("free", true)])));
        steps.push(
            Step::new(Method::PATCH, &format!("{PLANS}/free"))
                .expect_body(|b| assert_eq!(b, &json!({"metadata": {"finalizers": ["example.com/other"]}})))
                .reply(200, plan("free", true)),
        );
        let mock = Mock::new().with_rbac("uninstall.yaml");
        let client = mock.ctx.client.clone();
        let out = mock
            .run(steps, json!({}), async move { run(&client, &args(true, 0), Duration::ZERO).await })
            .await
            .unwrap();
        let released: Vec<(String, Vec<String>)> = out.into_iter().map(|o| (o.kind, o.released)).collect();
        assert_eq!(
            released,
            vec![
                ("AlertRule".into(), vec![]),
                ("Quota".into(), vec![]),
                ("Project".into(), vec!["telemetry/checkout".into()]),
                ("Tenant".into(), vec![]),
                ("Plan".into(), vec!["free".into()]),
            ]
        );
    }
}

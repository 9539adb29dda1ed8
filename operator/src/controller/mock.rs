//! A scripted Kubernetes API server for reconcile tests (kube's `tower-test` pattern): every
//! request must match the next expected step (method, path, optional body check); anything
//! missing, extra or different fails the test with the step it was at.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::runtime::events::Reporter;
use kube::Client;
use serde_json::{json, Value};

use super::Context;
use crate::admin::fake::{FakeAdmin, FakeConnector};
use crate::metrics::Metrics;

type BodyCheck = Box<dyn Fn(&Value) + Send>;

pub struct Step {
    method: Method,
    path: String,
    apply: bool,
    status: u16,
    reply: Option<Value>,
    check: Option<BodyCheck>,
}

impl Step {
    pub fn new(method: Method, path: &str) -> Self {
        Self { method, path: path.to_owned(), apply: false, status: 200, reply: None, check: None }
    }
    pub fn get(path: &str) -> Self {
        Self::new(Method::GET, path)
    }
    /// A server-side apply by the operator's field manager.
    pub fn apply(path: &str) -> Self {
        Self { apply: true, ..Self::new(Method::PATCH, path) }
    }
    pub fn reply(mut self, status: u16, body: Value) -> Self {
        self.status = status;
        self.reply = Some(body);
        self
    }
    pub fn not_found(self) -> Self {
        self.reply(
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "not found", "reason": "NotFound", "code": 404}),
        )
    }
    pub fn expect_body(mut self, check: impl Fn(&Value) + Send + 'static) -> Self {
        self.check = Some(Box::new(check));
        self
    }
    fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

pub fn fixed_now() -> Timestamp {
    Timestamp::from_second(1_795_000_000).expect("valid timestamp")
}

/// A context whose client talks to the scripted server, with a recording admin API, a fixed
/// clock and predictable secrets (`secret-1`, `secret-2`, …).
pub struct Mock {
    pub ctx: Arc<Context>,
    pub admin: Arc<FakeAdmin>,
    handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    /// The chart template whose ClusterRole must allow every request.
    rbac: &'static str,
}

impl Mock {
    pub fn new() -> Self {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let admin = Arc::new(FakeAdmin::default());
        let counter = Arc::new(Mutex::new(0u32));
        let mut ctx = Context::new(
            client,
            Arc::new(FakeConnector(admin.clone())),
            Arc::new(Metrics::default()),
            Reporter { controller: "sextant-operator".into(), instance: None },
        );
        ctx.secrets = Arc::new(move || {
            let mut n = counter.lock().unwrap();
            *n += 1;
            format!("secret-{n}")
        });
        ctx.clock = Arc::new(fixed_now);
        Self { ctx: Arc::new(ctx), admin, handle, rbac: "rbac.yaml" }
    }

    /// Checks requests against the ClusterRole of another template (e.g. `uninstall.yaml`).
    pub fn with_rbac(mut self, template: &'static str) -> Self {
        self.rbac = template;
        self
    }

    /// Runs `reconcile` against the script. `object` answers requests whose reply is not
    /// scripted and whose body is not an object (status patches).
    pub async fn run<T>(self, steps: Vec<Step>, object: Value, reconcile: impl Future<Output = T>) -> T {
        let failure = Arc::new(Mutex::new(None::<String>));
        let served = Arc::new(Mutex::new(0usize));
        let expected: Vec<String> = steps.iter().map(Step::describe).collect();
        let server = tokio::spawn(serve(self.handle, self.rbac, steps, object, failure.clone(), served.clone()));
        let out = tokio::time::timeout(Duration::from_secs(20), reconcile).await;
        server.abort();
        if let Some(f) = failure.lock().unwrap().take() {
            panic!("{f}");
        }
        let out = out.unwrap_or_else(|_| panic!("reconcile hung after {} requests", served.lock().unwrap()));
        let served = *served.lock().unwrap();
        assert_eq!(
            served,
            expected.len(),
            "reconcile stopped before `{}`",
            expected.get(served).cloned().unwrap_or_default()
        );
        out
    }
}

async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    rbac: &'static str,
    steps: Vec<Step>,
    object: Value,
    failure: Arc<Mutex<Option<String>>>,
    served: Arc<Mutex<usize>>,
) {
    let fail = |msg: String| {
        failure.lock().unwrap().get_or_insert(msg);
    };
    for (i, step) in steps.into_iter().enumerate() {
        let Some((request, send)) = handle.next_request().await else { return };
        let got = format!("{} {}", request.method(), request.uri().path());
        if got != step.describe() {
            return fail(format!("request {i}: expected `{}`, got `{got}`", step.describe()));
        }
        let query = request.uri().query().unwrap_or_default().to_owned();
        if let Err(e) = super::rbac_check::check_role(rbac, request.method().as_str(), request.uri().path(), &query) {
            return fail(format!("request {i}: {e}"));
        }
        if step.apply {
            let content_type =
                request.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            if !query.contains("fieldManager=sextant-operator")
                || !query.contains("force=true")
                || content_type != "application/apply-patch+yaml"
            {
                return fail(format!(
                    "request {i} ({got}) is not a forced apply by sextant-operator: ?{query} {content_type}"
                ));
            }
        }
        let bytes = request.into_body().collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if let Some(check) = &step.check {
            if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| check(&body))) {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                return fail(format!(
                    "request {i} ({got}) body check failed: {}\nbody: {body}",
                    msg.unwrap_or_default()
                ));
            }
        }
        let reply =
            step.reply.unwrap_or_else(|| if body.get("kind").is_some() { body.clone() } else { object.clone() });
        let response = Response::builder()
            .status(step.status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&reply).unwrap_or_default()))
            .expect("valid response");
        send.send_response(response);
        *served.lock().unwrap() += 1;
    }
    if let Some((request, _)) = handle.next_request().await {
        fail(format!("unexpected extra request `{} {}`", request.method(), request.uri().path()));
    }
}

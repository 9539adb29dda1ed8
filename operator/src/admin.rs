//! The cluster's admin API as the operator uses it: request and response shapes, the
//! [`ClusterAdmin`] trait and its HTTP implementation against a router's `/admin/v1/...`.
//!
//! Every call is idempotent: objects are keyed by the Kubernetes UID of the resource that owns
//! them (`PUT` creates or updates), deletes of unknown keys succeed (204).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
pub use sextant_model::admin::{
    AlertRuleRequest, AlertRuleResponse, ClusterGroup, ClusterGroups, ClusterNode, ClusterNodes, DrainRequest,
    NodeIdRequest, NodeIdentities, NodeIdentity, NodeReplacementStatus, PlacementRequest, PlanPrice, PlanRequest,
    PlanUsage, ProjectCredentials, ProjectRequest, ProjectResponse, QuotaRequest, QuotaUsage, TenantRequest,
    TenantResponse,
};
pub use sextant_model::meta::ManagedBy;

/// A delete that the cluster may finish later (project data is deleted shard by shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    Done,
    InProgress,
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin API unreachable: {0}")]
    Transport(#[from] reqwest::Error),
    #[error("admin API answered {status}: {body}")]
    Status { status: u16, body: String },
}

/// The admin API of one Sextant cluster.
pub trait ClusterAdmin: Send + Sync {
    fn upsert_tenant<'a>(
        &'a self,
        key: &'a str,
        req: &'a TenantRequest,
    ) -> BoxFuture<'a, Result<TenantResponse, AdminError>>;
    fn delete_tenant<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>>;
    fn upsert_project<'a>(
        &'a self,
        key: &'a str,
        req: &'a ProjectRequest,
    ) -> BoxFuture<'a, Result<ProjectResponse, AdminError>>;
    fn issue_credentials<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ProjectCredentials, AdminError>>;
    /// Deletes the project and all of its data.
    fn delete_project<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>>;
    fn upsert_plan<'a>(&'a self, name: &'a str, req: &'a PlanRequest) -> BoxFuture<'a, Result<(), AdminError>>;
    fn delete_plan<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>>;
    fn upsert_quota<'a>(&'a self, key: &'a str, req: &'a QuotaRequest) -> BoxFuture<'a, Result<(), AdminError>>;
    fn delete_quota<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>>;
    /// This month's usage against the quota's limits.
    fn quota_usage<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<QuotaUsage, AdminError>>;
    /// This month's usage of the organizations on the plan.
    fn plan_usage<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<PlanUsage, AdminError>>;
    fn upsert_alert_rule<'a>(
        &'a self,
        key: &'a str,
        req: &'a AlertRuleRequest,
    ) -> BoxFuture<'a, Result<AlertRuleResponse, AdminError>>;
    fn delete_alert_rule<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>>;
    fn nodes(&self) -> BoxFuture<'_, Result<ClusterNodes, AdminError>>;
    /// Each group's replicas and their zones.
    fn groups(&self) -> BoxFuture<'_, Result<ClusterGroups, AdminError>>;
    fn place_replicas<'a>(&'a self, req: &'a PlacementRequest) -> BoxFuture<'a, Result<(), AdminError>>;
    fn drain<'a>(&'a self, req: &'a DrainRequest) -> BoxFuture<'a, Result<(), AdminError>>;
    /// Which incarnation holds each node id, and which ids wait for or undergo replacement.
    fn identities(&self) -> BoxFuture<'_, Result<NodeIdentities, AdminError>>;
    /// Hands a node id to the incarnation that restarted under it on an empty disk; repeating an
    /// accepted request changes nothing (`409 not_replaceable` once it is done).
    fn replace_node(&self, id: u64) -> BoxFuture<'_, Result<(), AdminError>>;
    /// Moves every replica off a node given by id; repeating it changes nothing.
    fn remove_node(&self, id: u64) -> BoxFuture<'_, Result<(), AdminError>>;
}

/// Where a cluster's admin API is and the token that opens it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminEndpoint {
    pub url: String,
    pub token: String,
}

impl std::fmt::Debug for AdminEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminEndpoint").field("url", &self.url).finish_non_exhaustive()
    }
}

/// Makes a [`ClusterAdmin`] for an endpoint (tests substitute a recording fake).
pub trait AdminConnector: Send + Sync {
    fn connect(&self, endpoint: AdminEndpoint) -> Arc<dyn ClusterAdmin>;
}

/// The real connector: HTTP with a shared connection pool.
#[derive(Clone, Default)]
pub struct HttpConnector {
    http: reqwest::Client,
}

impl HttpConnector {
    pub fn new() -> Result<Self, AdminError> {
        Ok(Self { http: reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build()? })
    }
}

impl AdminConnector for HttpConnector {
    fn connect(&self, endpoint: AdminEndpoint) -> Arc<dyn ClusterAdmin> {
        Arc::new(HttpClusterAdmin { http: self.http.clone(), endpoint })
    }
}

pub struct HttpClusterAdmin {
    http: reqwest::Client,
    endpoint: AdminEndpoint,
}

impl HttpClusterAdmin {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}/admin/v1/{path}", self.endpoint.url.trim_end_matches('/')))
            .bearer_auth(&self.endpoint.token)
    }

    async fn send(builder: reqwest::RequestBuilder) -> Result<reqwest::Response, AdminError> {
        let response = builder.send().await?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        Err(AdminError::Status { status, body: body.chars().take(500).collect() })
    }

    async fn put<B: Serialize, R: serde::de::DeserializeOwned>(&self, path: String, body: &B) -> Result<R, AdminError> {
        Ok(Self::send(self.request(reqwest::Method::PUT, &path).json(body)).await?.json().await?)
    }

    async fn get<R: serde::de::DeserializeOwned>(&self, path: String) -> Result<R, AdminError> {
        Ok(Self::send(self.request(reqwest::Method::GET, &path)).await?.json().await?)
    }

    async fn put_no_content<B: Serialize>(&self, path: String, body: &B) -> Result<(), AdminError> {
        Self::send(self.request(reqwest::Method::PUT, &path).json(body)).await.map(drop)
    }

    /// Deletes are idempotent on the cluster side (204 for an unknown key too); 202 means the
    /// cluster is still deleting. A 404 is an error: it is what a router without the admin API
    /// answers, and taking it for "already gone" would release a finalizer with the data kept.
    async fn delete(&self, path: String) -> Result<Deletion, AdminError> {
        let response = Self::send(self.request(reqwest::Method::DELETE, &path)).await?;
        Ok(if response.status() == reqwest::StatusCode::ACCEPTED { Deletion::InProgress } else { Deletion::Done })
    }
}

/// Path segments are Kubernetes names and UIDs: `[a-z0-9.-]`, nothing to escape; checked
/// anyway so a hostile name cannot walk the admin API's paths.
fn segment(s: &str) -> Result<&str, AdminError> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') && s != "." && s != ".."
    {
        Ok(s)
    } else {
        Err(AdminError::Status { status: 400, body: format!("invalid key `{s}`") })
    }
}

impl ClusterAdmin for HttpClusterAdmin {
    fn upsert_tenant<'a>(
        &'a self,
        key: &'a str,
        req: &'a TenantRequest,
    ) -> BoxFuture<'a, Result<TenantResponse, AdminError>> {
        Box::pin(async move { self.put(format!("tenants/{}", segment(key)?), req).await })
    }
    fn delete_tenant<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
        Box::pin(async move { self.delete(format!("tenants/{}", segment(key)?)).await })
    }
    fn upsert_project<'a>(
        &'a self,
        key: &'a str,
        req: &'a ProjectRequest,
    ) -> BoxFuture<'a, Result<ProjectResponse, AdminError>> {
        Box::pin(async move { self.put(format!("projects/{}", segment(key)?), req).await })
    }
    fn issue_credentials<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ProjectCredentials, AdminError>> {
        Box::pin(async move {
            let path = format!("projects/{}/credentials", segment(key)?);
            Ok(Self::send(self.request(reqwest::Method::POST, &path)).await?.json().await?)
        })
    }
    fn delete_project<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
        Box::pin(async move { self.delete(format!("projects/{}", segment(key)?)).await })
    }
    fn upsert_plan<'a>(&'a self, name: &'a str, req: &'a PlanRequest) -> BoxFuture<'a, Result<(), AdminError>> {
        Box::pin(async move { self.put_no_content(format!("plans/{}", segment(name)?), req).await })
    }
    fn delete_plan<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
        Box::pin(async move { self.delete(format!("plans/{}", segment(name)?)).await })
    }
    fn upsert_quota<'a>(&'a self, key: &'a str, req: &'a QuotaRequest) -> BoxFuture<'a, Result<(), AdminError>> {
        Box::pin(async move { self.put_no_content(format!("quotas/{}", segment(key)?), req).await })
    }
    fn delete_quota<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
        Box::pin(async move { self.delete(format!("quotas/{}", segment(key)?)).await })
    }
    fn quota_usage<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<QuotaUsage, AdminError>> {
        Box::pin(async move { self.get(format!("quotas/{}/usage", segment(key)?)).await })
    }
    fn plan_usage<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<PlanUsage, AdminError>> {
        Box::pin(async move { self.get(format!("plans/{}/usage", segment(name)?)).await })
    }
    fn upsert_alert_rule<'a>(
        &'a self,
        key: &'a str,
        req: &'a AlertRuleRequest,
    ) -> BoxFuture<'a, Result<AlertRuleResponse, AdminError>> {
        Box::pin(async move { self.put(format!("alert-rules/{}", segment(key)?), req).await })
    }
    fn delete_alert_rule<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
        Box::pin(async move { self.delete(format!("alert-rules/{}", segment(key)?)).await })
    }
    fn nodes(&self) -> BoxFuture<'_, Result<ClusterNodes, AdminError>> {
        Box::pin(
            async move { Ok(Self::send(self.request(reqwest::Method::GET, "cluster/nodes")).await?.json().await?) },
        )
    }
    fn groups(&self) -> BoxFuture<'_, Result<ClusterGroups, AdminError>> {
        Box::pin(async move { self.get("cluster/groups".into()).await })
    }
    fn place_replicas<'a>(&'a self, req: &'a PlacementRequest) -> BoxFuture<'a, Result<(), AdminError>> {
        Box::pin(async move {
            Self::send(self.request(reqwest::Method::POST, "cluster/placement").json(req)).await.map(drop)
        })
    }
    fn drain<'a>(&'a self, req: &'a DrainRequest) -> BoxFuture<'a, Result<(), AdminError>> {
        Box::pin(
            async move { Self::send(self.request(reqwest::Method::POST, "cluster/drain").json(req)).await.map(drop) },
        )
    }
    fn identities(&self) -> BoxFuture<'_, Result<NodeIdentities, AdminError>> {
        Box::pin(async move { self.get("cluster/identities".into()).await })
    }
    fn replace_node(&self, id: u64) -> BoxFuture<'_, Result<(), AdminError>> {
        Box::pin(async move {
            let req = NodeIdRequest { id };
            Self::send(self.request(reqwest::Method::POST, "cluster/replace").json(&req)).await.map(drop)
        })
    }
    fn remove_node(&self, id: u64) -> BoxFuture<'_, Result<(), AdminError>> {
        Box::pin(async move {
            let req = NodeIdRequest { id };
            Self::send(self.request(reqwest::Method::POST, "cluster/remove").json(&req)).await.map(drop)
        })
    }
}

#[cfg(test)]
pub mod fake {
    //! A [`ClusterAdmin`] that records every call and answers from memory.

    use std::sync::Mutex;

    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    pub enum Call {
        Connect(String),
        UpsertTenant(String, TenantRequest),
        DeleteTenant(String),
        UpsertProject(String, ProjectRequest),
        IssueCredentials(String),
        DeleteProject(String),
        UpsertPlan(String, PlanRequest),
        DeletePlan(String),
        UpsertQuota(String, QuotaRequest),
        DeleteQuota(String),
        QuotaUsage(String),
        PlanUsage(String),
        UpsertAlertRule(String, AlertRuleRequest),
        DeleteAlertRule(String),
        Nodes,
        Groups,
        PlaceReplicas(Vec<String>),
        Drain(String),
        Identities,
        ReplaceNode(u64),
        RemoveNode(u64),
    }

    #[derive(Default)]
    pub struct FakeAdmin {
        pub calls: Mutex<Vec<Call>>,
        pub nodes: Mutex<Vec<ClusterNode>>,
        /// What `groups` answers; `None`: 404, as a router without it.
        pub groups: Mutex<Option<ClusterGroups>>,
        pub identities: Mutex<Vec<NodeIdentity>>,
        /// When set, only `identities` fails (503).
        pub identities_unavailable: std::sync::atomic::AtomicBool,
        /// When set, every call fails as an unreachable cluster would.
        pub unavailable: std::sync::atomic::AtomicBool,
        /// What usage reads answer; `None`: 404, as a router without them.
        pub quota_usage: Mutex<Option<QuotaUsage>>,
        pub plan_usage: Mutex<Option<PlanUsage>>,
    }

    impl FakeAdmin {
        pub fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }
        fn record(&self, call: Call) -> Result<(), AdminError> {
            self.calls.lock().unwrap().push(call);
            if self.unavailable.load(std::sync::atomic::Ordering::SeqCst) {
                Err(AdminError::Status { status: 503, body: "no meta leader".into() })
            } else {
                Ok(())
            }
        }
    }

    /// Connects every endpoint to the same fake, recording the URL.
    pub struct FakeConnector(pub Arc<FakeAdmin>);

    impl AdminConnector for FakeConnector {
        fn connect(&self, endpoint: AdminEndpoint) -> Arc<dyn ClusterAdmin> {
            self.0.calls.lock().unwrap().push(Call::Connect(endpoint.url));
            self.0.clone()
        }
    }

    impl ClusterAdmin for FakeAdmin {
        fn upsert_tenant<'a>(
            &'a self,
            key: &'a str,
            req: &'a TenantRequest,
        ) -> BoxFuture<'a, Result<TenantResponse, AdminError>> {
            Box::pin(async move {
                self.record(Call::UpsertTenant(key.into(), req.clone()))?;
                Ok(TenantResponse { org_id: format!("org-{key}") })
            })
        }
        fn delete_tenant<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
            Box::pin(async move { self.record(Call::DeleteTenant(key.into())).map(|_| Deletion::Done) })
        }
        fn upsert_project<'a>(
            &'a self,
            key: &'a str,
            req: &'a ProjectRequest,
        ) -> BoxFuture<'a, Result<ProjectResponse, AdminError>> {
            Box::pin(async move {
                self.record(Call::UpsertProject(key.into(), req.clone()))?;
                Ok(ProjectResponse { project_id: format!("prj-{key}") })
            })
        }
        fn issue_credentials<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ProjectCredentials, AdminError>> {
            Box::pin(async move {
                self.record(Call::IssueCredentials(key.into()))?;
                Ok(ProjectCredentials {
                    project_id: format!("prj-{key}"),
                    ingest_token: "sxp_test".into(),
                    api_key: "sxk_0000000000000001_test".into(),
                })
            })
        }
        fn delete_project<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
            Box::pin(async move { self.record(Call::DeleteProject(key.into())).map(|_| Deletion::Done) })
        }
        fn upsert_plan<'a>(&'a self, name: &'a str, req: &'a PlanRequest) -> BoxFuture<'a, Result<(), AdminError>> {
            Box::pin(async move { self.record(Call::UpsertPlan(name.into(), req.clone())) })
        }
        fn delete_plan<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
            Box::pin(async move { self.record(Call::DeletePlan(name.into())).map(|_| Deletion::Done) })
        }
        fn upsert_quota<'a>(&'a self, key: &'a str, req: &'a QuotaRequest) -> BoxFuture<'a, Result<(), AdminError>> {
            Box::pin(async move { self.record(Call::UpsertQuota(key.into(), req.clone())) })
        }
        fn delete_quota<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
            Box::pin(async move { self.record(Call::DeleteQuota(key.into())).map(|_| Deletion::Done) })
        }
        fn quota_usage<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<QuotaUsage, AdminError>> {
            Box::pin(async move {
                self.record(Call::QuotaUsage(key.into()))?;
                self.quota_usage.lock().unwrap().clone().ok_or(AdminError::Status { status: 404, body: String::new() })
            })
        }
        fn plan_usage<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<PlanUsage, AdminError>> {
            Box::pin(async move {
                self.record(Call::PlanUsage(name.into()))?;
                self.plan_usage.lock().unwrap().clone().ok_or(AdminError::Status { status: 404, body: String::new() })
            })
        }
        fn upsert_alert_rule<'a>(
            &'a self,
            key: &'a str,
            req: &'a AlertRuleRequest,
        ) -> BoxFuture<'a, Result<AlertRuleResponse, AdminError>> {
            Box::pin(async move {
                self.record(Call::UpsertAlertRule(key.into(), req.clone()))?;
                Ok(AlertRuleResponse {
                    id: format!("rule-{key}"),
                    state: Some("firing".into()),
                    last_value: Some(0.25),
                    last_transition_at: Some("2026-11-26T10:00:00.000Z".into()),
                })
            })
        }
        fn delete_alert_rule<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Deletion, AdminError>> {
            Box::pin(async move { self.record(Call::DeleteAlertRule(key.into())).map(|_| Deletion::Done) })
        }
        fn nodes(&self) -> BoxFuture<'_, Result<ClusterNodes, AdminError>> {
            Box::pin(async move {
                self.record(Call::Nodes)?;
                Ok(ClusterNodes { nodes: self.nodes.lock().unwrap().clone() })
            })
        }
        fn groups(&self) -> BoxFuture<'_, Result<ClusterGroups, AdminError>> {
            Box::pin(async move {
                self.record(Call::Groups)?;
                let groups = self.groups.lock().unwrap().clone();
                groups.ok_or_else(|| AdminError::Status { status: 404, body: "no such endpoint".into() })
            })
        }
        fn place_replicas<'a>(&'a self, req: &'a PlacementRequest) -> BoxFuture<'a, Result<(), AdminError>> {
            Box::pin(async move { self.record(Call::PlaceReplicas(req.nodes.clone())) })
        }
        fn drain<'a>(&'a self, req: &'a DrainRequest) -> BoxFuture<'a, Result<(), AdminError>> {
            Box::pin(async move { self.record(Call::Drain(req.address.clone())) })
        }
        fn identities(&self) -> BoxFuture<'_, Result<NodeIdentities, AdminError>> {
            Box::pin(async move {
                self.record(Call::Identities)?;
                if self.identities_unavailable.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(AdminError::Status { status: 503, body: "no meta leader".into() });
                }
                Ok(NodeIdentities { nodes: self.identities.lock().unwrap().clone() })
            })
        }
        fn replace_node(&self, id: u64) -> BoxFuture<'_, Result<(), AdminError>> {
            Box::pin(async move { self.record(Call::ReplaceNode(id)) })
        }
        fn remove_node(&self, id: u64) -> BoxFuture<'_, Result<(), AdminError>> {
            Box::pin(async move { self.record(Call::RemoveNode(id)) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1alpha1::{AlertFilter, AlertMetric, Comparison};

    #[test]
    fn keys_that_could_escape_a_path_segment_are_refused() {
        assert!(segment("9b2e6f9e-0000-4000-8000-000000000001").is_ok());
        assert!(segment("pro").is_ok());
        for bad in ["", "..", "a/b", "a?b", "a%2f"] {
            assert!(segment(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wire_shapes_are_snake_case_json() {
        let req = AlertRuleRequest {
            project_key: "p".into(),
            name: "errors".into(),
            metric: AlertMetric::P95LatencyMs,
            filter: AlertFilter { service: Some("api".into()), ..AlertFilter::default() },
            comparison: Comparison::GreaterOrEqual,
            threshold: 250.0,
            window_minutes: 5,
            enabled: true,
            managed_by: ManagedBy {
                api_version: "sextant.dev/v1alpha1".into(),
                kind: "AlertRule".into(),
                namespace: Some("t".into()),
                name: "errors".into(),
                uid: "u".into(),
            },
            for_seconds: 0,
            webhook_id: None,
        };
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(v["metric"], "p95_latency_ms");
        assert_eq!(v["comparison"], ">=");
        assert_eq!(v["window_minutes"], 5);
        assert_eq!(v["filter"], serde_json::json!({"service": "api"}));
        assert_eq!(v["managed_by"]["kind"], "AlertRule");
    }
}

#[cfg(test)]
mod http_tests {
    //! The HTTP implementation against a local stand-in router: paths, bearer token, bodies
    //! and the meaning of 202 and 404.

    use std::sync::{Arc, Mutex};

    use axum::extract::State;
    use axum::http::{HeaderMap, Method, StatusCode, Uri};
    use axum::routing::any;
    use serde_json::{json, Value};

    use super::*;
    use crate::v1alpha1::MembershipState;

    type Seen = Arc<Mutex<Vec<(Method, String, Option<String>, Value)>>>;

    async fn stand_in(
        State(seen): State<Seen>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: String,
    ) -> (StatusCode, String) {
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        seen.lock().unwrap().push((method.clone(), uri.path().to_owned(), auth, body));
        let path = uri.path();
        match (method.as_str(), path) {
            ("PUT", p) if p.starts_with("/admin/v1/tenants/") => {
                (StatusCode::OK, json!({"org_id": "org-1"}).to_string())
            }
            ("POST", "/admin/v1/projects/p-1/credentials") => (
                StatusCode::OK,
                json!({"project_id": "prj-1", "ingest_token": "sxp_a", "api_key": "sxk_b"}).to_string(),
            ),
            ("DELETE", "/admin/v1/projects/p-1") => (StatusCode::ACCEPTED, String::new()),
            ("DELETE", "/admin/v1/projects/gone") => (StatusCode::NO_CONTENT, String::new()),
            // What a router without the admin API answers.
            ("DELETE", "/admin/v1/projects/no-api") => (
                StatusCode::NOT_FOUND,
                json!({"error": {"code": "not_found", "message": "no such endpoint"}}).to_string(),
            ),
            ("PUT", "/admin/v1/plans/pro") => (StatusCode::NO_CONTENT, String::new()),
            ("GET", "/admin/v1/quotas/q-1/usage") => (
                StatusCode::OK,
                json!({"period": "2026-11", "period_start": "2026-11-01T00:00:00.000Z",
                       "period_end": "2026-12-01T00:00:00.000Z", "used_bytes": 1500, "limit_bytes": 2000,
                       "used_events": 3, "limit_events": null})
                .to_string(),
            ),
            ("GET", "/admin/v1/cluster/nodes") => (
                StatusCode::OK,
                json!({"nodes": [{"id": 1, "address": "obs-node-0.obs-node.t.svc:7000", "state": "Draining"}]})
                    .to_string(),
            ),
            ("POST", "/admin/v1/cluster/drain") => (StatusCode::ACCEPTED, String::new()),
            ("GET", "/admin/v1/cluster/identities") => (
                StatusCode::OK,
                json!({"nodes": [{"id": 3, "incarnation": "00000000000000aa", "needs_replacement": "00000000000000bb",
                                  "replacing": null}]})
                .to_string(),
            ),
            ("POST", "/admin/v1/cluster/replace" | "/admin/v1/cluster/remove") => (StatusCode::ACCEPTED, String::new()),
            _ => (
                StatusCode::CONFLICT,
                json!({"error": {"code": "managed", "message": "managed by a resource"}}).to_string(),
            ),
        }
    }

    async fn start() -> (Arc<dyn ClusterAdmin>, Seen) {
        let seen: Seen = Arc::default();
        let app = axum::Router::new().route("/{*path}", any(stand_in)).with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let admin = HttpConnector::new().unwrap().connect(AdminEndpoint { url, token: "tok".into() });
        (admin, seen)
    }

    fn managed() -> ManagedBy {
        ManagedBy {
            api_version: "sextant.dev/v1alpha1".into(),
            kind: "Tenant".into(),
            namespace: Some("t".into()),
            name: "acme".into(),
            uid: "u-1".into(),
        }
    }

    #[tokio::test]
    async fn calls_carry_the_admin_token_and_follow_the_documented_paths() {
        let (admin, seen) = start().await;
        let req = TenantRequest {
            display_name: "Acme".into(),
            plan: "pro".into(),
            owner_email: "ops@acme.test".into(),
            suspended: false,
            managed_by: managed(),
        };
        assert_eq!(admin.upsert_tenant("u-1", &req).await.unwrap().org_id, "org-1");
        let creds = admin.issue_credentials("p-1").await.unwrap();
        assert_eq!((creds.ingest_token.as_str(), creds.api_key.as_str()), ("sxp_a", "sxk_b"));
        assert_eq!(admin.delete_project("p-1").await.unwrap(), Deletion::InProgress);
        assert_eq!(admin.delete_project("gone").await.unwrap(), Deletion::Done);
        let nodes = admin.nodes().await.unwrap();
        assert_eq!(nodes.nodes[0].state, MembershipState::Draining);
        admin.drain(&DrainRequest { address: "obs-node-0.obs-node.t.svc:7000".into() }).await.unwrap();
        let ids = admin.identities().await.unwrap();
        assert_eq!(ids.nodes[0].needs_replacement.as_deref(), Some("00000000000000bb"));
        admin.replace_node(3).await.unwrap();
        admin.remove_node(3).await.unwrap();
        let plan = PlanRequest {
            display_name: None,
            gb_per_month: Some(10),
            events_per_month: None,
            retention_days: 30,
            features: vec![],
            price: None,
            managed_by: managed(),
        };
        admin.upsert_plan("pro", &plan).await.unwrap();
        let usage = admin.quota_usage("q-1").await.unwrap();
        assert_eq!((usage.used_bytes, usage.limit_bytes, usage.limit_events), (1500, Some(2000), None));

        let seen = seen.lock().unwrap().clone();
        assert!(seen.iter().all(|(_, _, auth, _)| auth.as_deref() == Some("Bearer tok")), "{seen:?}");
        let paths: Vec<String> = seen.iter().map(|(m, p, _, _)| format!("{m} {p}")).collect();
        assert_eq!(
            paths,
            [
                "PUT /admin/v1/tenants/u-1",
                "POST /admin/v1/projects/p-1/credentials",
                "DELETE /admin/v1/projects/p-1",
                "DELETE /admin/v1/projects/gone",
                "GET /admin/v1/cluster/nodes",
                "POST /admin/v1/cluster/drain",
                "GET /admin/v1/cluster/identities",
                "POST /admin/v1/cluster/replace",
                "POST /admin/v1/cluster/remove",
                "PUT /admin/v1/plans/pro",
                "GET /admin/v1/quotas/q-1/usage",
            ]
        );
        assert_eq!(seen[0].3["owner_email"], "ops@acme.test");
        assert_eq!(seen[0].3["managed_by"]["uid"], "u-1");
        assert_eq!(seen[7].3, json!({"id": 3}));
        assert_eq!(seen[9].3["gb_per_month"], 10);
        assert_eq!(seen[9].3["events_per_month"], Value::Null, "unlimited is an explicit null");
    }

    #[tokio::test]
    async fn refusals_surface_with_status_and_body() {
        let (admin, _) = start().await;
        let err = admin.delete_tenant("u-1").await.unwrap_err();
        assert!(matches!(&err, AdminError::Status { status: 409, body } if body.contains("managed")), "{err}");
        assert!(admin.delete_tenant("../etc").await.is_err(), "path escapes are refused before any request");
        let err = admin.delete_project("no-api").await.unwrap_err();
        assert!(
            matches!(err, AdminError::Status { status: 404, .. }),
            "a 404 is never taken for a completed delete: {err}"
        );
    }
}

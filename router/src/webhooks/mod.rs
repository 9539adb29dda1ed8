//! Webhooks (docs/API.md, "Webhooks"): the endpoints ([`api`]), Standard Webhooks signing
//! ([`sign`]), where deliveries may go ([`guard`]), and the worker every router runs
//! ([`worker`]). Meta holds the webhooks and the durable delivery queue; this module publishes
//! into it when analytics events are committed and when a monthly quota is crossed.

pub mod api;
pub mod guard;
pub mod sign;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sextant_model::meta::{MetaCommand, MetaCommandResult};
use sextant_model::row::Event;
use sextant_model::usage::{month_of_millis, Exceeded};
use sextant_model::webhook::{CustomerEvent, SystemEvent, SYSTEM_QUOTA_EXCEEDED};
use sextant_model::{OrgId, ProjectId};
use sha2::{Digest, Sha256};

use crate::cluster::MetaCache;
use crate::ingest::quota::Meter;
use crate::AppState;

/// A router's webhook machinery.
pub struct Webhooks {
    pub policy: guard::TargetPolicy,
    /// Every delivery and test ping is sent with this client.
    pub client: reqwest::Client,
    /// Quota crossings this router already published (meta deduplicates across routers).
    quota_published: Arc<Mutex<HashSet<(OrgId, u32, Meter)>>>,
}

impl Webhooks {
    pub fn new(policy: guard::TargetPolicy) -> Self {
        Webhooks { policy, client: guard::client(policy), quota_published: Arc::default() }
    }
}

/// Event names some enabled webhook of each project subscribes to, from the cached view.
fn subscriptions(cache: &MetaCache) -> HashMap<ProjectId, HashSet<&str>> {
    let mut by_project: HashMap<ProjectId, HashSet<&str>> = HashMap::new();
    for hook in cache.webhooks.iter().filter(|h| h.enabled) {
        by_project.entry(hook.project_id).or_default().extend(hook.events.iter().map(String::as_str));
    }
    by_project
}

/// The events of `rows` some webhook of `project` subscribes to, as deliveries show them.
/// Taken before the rows are committed; empty (and cheap) when no webhook wants any.
pub fn subscribed_events(app: &AppState, project: &ProjectId, rows: &[Event]) -> Vec<CustomerEvent> {
    let Some(cache) = app.cluster.meta_cache() else { return Vec::new() };
    let subs = subscriptions(&cache);
    let Some(names) = subs.get(project) else { return Vec::new() };
    rows.iter()
        .filter(|e| names.contains(e.event.as_str()))
        .map(|e| CustomerEvent {
            name: e.event.clone(),
            body: json!({
                "uuid": e.uuid,
                "event": e.event,
                "distinct_id": e.distinct_id,
                "timestamp": sextant_model::time::format_nanos(e.unix_nanos),
                "properties": serde_json::from_str::<Value>(&e.properties_json).unwrap_or(Value::Null),
            }),
        })
        .collect()
}

/// Enqueues deliveries of committed `events` of `project`. The batch id is derived from the
/// events themselves, so a client's retry of the same request enqueues nothing more. Failures are
/// logged: the events are stored either way, and the answer to the client says so.
pub async fn publish_customer_events(app: &AppState, project: &ProjectId, events: Vec<CustomerEvent>) {
    if events.is_empty() {
        return;
    }
    let Some(org_id) = app.cluster.meta_cache().and_then(|c| c.projects.get(project).map(|p| p.org_id)) else {
        return;
    };
    let mut ids = Sha256::new();
    ids.update(project.to_string().as_bytes());
    for e in &events {
        ids.update(e.body.to_string().as_bytes());
        ids.update(b"\0");
    }
    let command = MetaCommand::PublishCustomerEvents {
        batch_id: format!("events:{}", &hex::encode(ids.finalize())[..32]),
        org_id,
        project_id: *project,
        at_ms: app.clock.now_millis(),
        events,
    };
    let cluster = app.cluster.clone();
    // Its own task, like the commit before it: a client that disconnects does not cancel it.
    let publish = tokio::spawn(async move { cluster.meta_write::<MetaCommandResult>(&command).await });
    match publish.await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(project = %project, error = %e, "could not enqueue webhook deliveries"),
        Err(e) => tracing::warn!(project = %project, error = %e, "enqueueing webhook deliveries failed"),
    }
}

/// Publishes `system.quota_exceeded` for the org of `project` once per org, month and meter
/// (its id says which, so every router publishing it enqueues one delivery).
pub fn quota_crossed(app: &AppState, cache: &MetaCache, project: ProjectId, meter: Meter, exceeded: &Exceeded) {
    let Some(org_id) = cache.projects.get(&project).map(|p| p.org_id) else { return };
    let now_ms = app.clock.now_millis();
    let month = month_of_millis(now_ms);
    {
        let mut published = app.webhooks.quota_published.lock().unwrap();
        published.retain(|(_, m, _)| *m >= month); // months that ended are forgotten
        if !published.insert((org_id, month, meter)) {
            return;
        }
    }
    let event = SystemEvent {
        id: format!("quota:{org_id}:{month}:{}", meter.name()),
        name: SYSTEM_QUOTA_EXCEEDED.into(),
        org_id,
        project_id: None,
        occurred_at_ms: now_ms,
        payload: json!({
            "org_id": org_id.to_string(),
            "project_id": project.to_string(),
            "meter": meter.name(),
            "month": format!("{}-{:02}", month / 100, month % 100),
            "limit": exceeded.limit,
            "used": exceeded.used,
            "hard": exceeded.hard,
        }),
        webhook_id: None,
    };
    let cluster = app.cluster.clone();
    let published = app.webhooks.quota_published.clone();
    tokio::spawn(async move {
        let command = MetaCommand::PublishSystemEvent { event };
        if let Err(e) = cluster.meta_write::<MetaCommandResult>(&command).await {
            tracing::warn!(org = %org_id, error = %e, "could not publish system.quota_exceeded");
            // The next request over the quota tries again.
            published.lock().unwrap().remove(&(org_id, month, meter));
        }
    });
}

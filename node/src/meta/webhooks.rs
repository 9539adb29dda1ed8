//! Webhooks and their durable delivery queue (docs/API.md, "Webhooks"). A delivery is leased to
//! one worker at a time; a lease is a deadline in the log, so a crashed worker's lease lapses
//! and another worker takes the delivery. Attempts, outcomes and the next attempt's time are
//! decided by the worker and recorded here, in log order.

use std::collections::BTreeMap;

use sextant_model::meta::{MetaCommandResult, Refusal};
use sextant_model::webhook::{
    delivery_id, system_event_body, Attempt, AttemptOutcome, CustomerEvent, Delivery, DeliveryStatus, Lease,
    LeasedDelivery, SigningSecret, SystemEvent, Webhook, WebhookInfo, WebhookSecret, CUSTOMER_EVENTS, MAX_BODY_BYTES,
    MAX_EVENT_ID_LEN, MAX_FINISHED_PER_WEBHOOK, MAX_PENDING_PER_WEBHOOK, MAX_WEBHOOKS_PER_PROJECT, PUBLISHED_ID_TTL_MS,
    RETRY_DELAYS_MS, ROTATION_OVERLAP_MS, TEST_EVENT,
};
use sextant_model::{OrgId, ProjectId};

use super::MetaState;
use MetaCommandResult::{Done, Refused};

/// Attempts kept per delivery: the schedule's, plus a few recorded under lapsed leases.
const MAX_ATTEMPTS_KEPT: usize = RETRY_DELAYS_MS.len() + 1 + 8;

#[derive(Clone, Debug, Default)]
pub(super) struct Webhooks {
    pub(super) hooks: BTreeMap<String, Webhook>,
    /// Webhook id -> delivery id -> delivery.
    pub(super) deliveries: BTreeMap<String, BTreeMap<String, Delivery>>,
    /// Ids of published events and batches -> when, so that a repeat enqueues nothing.
    pub(super) published: BTreeMap<String, i64>,
}

impl Webhooks {
    pub(super) fn of_project(&self, project_id: ProjectId) -> Vec<WebhookInfo> {
        let mut list: Vec<&Webhook> = self.hooks.values().filter(|h| h.project_id == project_id).collect();
        list.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        list.into_iter().map(Webhook::info).collect()
    }

    /// Newest first, without bodies.
    pub(super) fn deliveries_of(&self, project_id: ProjectId, webhook_id: &str) -> Vec<Delivery> {
        if self.hooks.get(webhook_id).is_none_or(|h| h.project_id != project_id) {
            return Vec::new();
        }
        let mut list: Vec<Delivery> = self
            .deliveries
            .get(webhook_id)
            .map(|d| d.values().map(|d| Delivery { body: String::new(), ..d.clone() }).collect())
            .unwrap_or_default();
        list.sort_by(|a, b| (b.created_at_ms, &b.id).cmp(&(a.created_at_ms, &a.id)));
        list
    }

    pub(super) fn enabled(&self) -> Vec<WebhookInfo> {
        self.hooks.values().filter(|h| h.enabled).map(Webhook::info).collect()
    }

    /// Deliveries a worker may take at `now_ms`, of enabled webhooks of `live` projects.
    fn due<'a>(&'a self, now_ms: i64, live: &'a dyn Fn(ProjectId) -> bool) -> impl Iterator<Item = &'a Delivery> + 'a {
        self.hooks.values().filter(move |h| h.enabled && live(h.project_id)).flat_map(move |h| {
            self.deliveries.get(&h.id).into_iter().flat_map(|d| d.values()).filter(move |d| {
                d.status == DeliveryStatus::Pending
                    && d.next_attempt_at_ms.is_some_and(|t| t <= now_ms)
                    && d.lease.as_ref().is_none_or(|l| l.until_ms <= now_ms)
            })
        })
    }

    pub(super) fn due_count(&self, now_ms: i64, live: &dyn Fn(ProjectId) -> bool) -> u64 {
        self.due(now_ms, live).count() as u64
    }

    fn prune(&mut self, now_ms: i64, live: &dyn Fn(ProjectId) -> bool) {
        self.published.retain(|_, at| now_ms.saturating_sub(*at) < PUBLISHED_ID_TTL_MS);
        let gone: Vec<String> = self.hooks.values().filter(|h| !live(h.project_id)).map(|h| h.id.clone()).collect();
        for id in gone {
            self.hooks.remove(&id);
            self.deliveries.remove(&id);
        }
    }

    /// Adds a delivery of `body` to `hook`, due at once, unless it already exists or the queue
    /// is full.
    fn enqueue(&mut self, hook_id: &str, id: String, event: &str, body: String, at_ms: i64) {
        let Some(hook) = self.hooks.get_mut(hook_id) else { return };
        let queue = self.deliveries.entry(hook_id.to_string()).or_default();
        if queue.contains_key(&id) {
            return;
        }
        if queue.values().filter(|d| d.status == DeliveryStatus::Pending).count() >= MAX_PENDING_PER_WEBHOOK {
            hook.dropped = hook.dropped.saturating_add(1);
            return;
        }
        queue.insert(
            id.clone(),
            Delivery {
                id,
                webhook_id: hook_id.to_string(),
                event: event.to_string(),
                body,
                created_at_ms: at_ms,
                status: DeliveryStatus::Pending,
                attempts: Vec::new(),
                next_attempt_at_ms: Some(at_ms),
                lease: None,
            },
        );
    }

    /// Drops the oldest finished deliveries of a webhook beyond [`MAX_FINISHED_PER_WEBHOOK`].
    fn trim(&mut self, hook_id: &str) {
        let Some(queue) = self.deliveries.get_mut(hook_id) else { return };
        let mut finished: Vec<(i64, String)> = queue
            .values()
            .filter(|d| d.status != DeliveryStatus::Pending)
            .map(|d| (d.created_at_ms, d.id.clone()))
            .collect();
        if finished.len() <= MAX_FINISHED_PER_WEBHOOK {
            return;
        }
        finished.sort();
        let excess = finished.len() - MAX_FINISHED_PER_WEBHOOK;
        for (_, id) in finished.into_iter().take(excess) {
            queue.remove(&id);
        }
    }

    pub(super) fn publish_system(&mut self, event: SystemEvent) -> MetaCommandResult {
        if event.id.is_empty() || event.id.len() > MAX_EVENT_ID_LEN {
            return Refused(Refusal::NotFound);
        }
        if self.published.contains_key(&event.id) {
            return Done;
        }
        self.published.insert(event.id.clone(), event.occurred_at_ms);
        let body = system_event_body(&event);
        let targets: Vec<String> = self
            .hooks
            .values()
            .filter(|h| h.org_id == event.org_id && event.project_id.is_none_or(|p| p == h.project_id))
            .filter(|h| match &event.webhook_id {
                // A targeted event goes to its webhook alone, subscribed to it or not.
                Some(target) => h.enabled && &h.id == target,
                None => h.subscribes(&event.name),
            })
            .map(|h| h.id.clone())
            .collect();
        for hook in targets {
            self.enqueue(&hook, delivery_id(&event.id, &hook), &event.name, body.clone(), event.occurred_at_ms);
        }
        Done
    }

    pub(super) fn publish_customer(
        &mut self,
        batch_id: String,
        org_id: OrgId,
        project_id: ProjectId,
        at_ms: i64,
        events: Vec<CustomerEvent>,
    ) -> MetaCommandResult {
        if batch_id.is_empty() || batch_id.len() > MAX_EVENT_ID_LEN {
            return Refused(Refusal::NotFound);
        }
        if self.published.contains_key(&batch_id) {
            return Done;
        }
        self.published.insert(batch_id.clone(), at_ms);
        let timestamp = sextant_model::time::format_nanos(at_ms.saturating_mul(1_000_000));
        let targets: Vec<(String, Vec<String>)> = self
            .hooks
            .values()
            .filter(|h| h.org_id == org_id && h.project_id == project_id && h.enabled)
            .map(|h| (h.id.clone(), h.events.clone()))
            .collect();
        for (hook, names) in targets {
            let mine: Vec<String> =
                events.iter().filter(|e| names.contains(&e.name)).map(|e| e.body.to_string()).collect();
            for (n, chunk) in chunks(mine).into_iter().enumerate() {
                let body = format!(
                    r#"{{"type":"{CUSTOMER_EVENTS}","timestamp":"{timestamp}","data":{{"events":[{}]}}}}"#,
                    chunk.join(",")
                );
                self.enqueue(&hook, delivery_id(&format!("{batch_id}#{n}"), &hook), CUSTOMER_EVENTS, body, at_ms);
            }
        }
        Done
    }

    pub(super) fn lease(
        &mut self,
        worker: String,
        token: String,
        now_ms: i64,
        lease_ms: i64,
        max: u32,
        live: &dyn Fn(ProjectId) -> bool,
    ) -> MetaCommandResult {
        let until_ms = now_ms.saturating_add(lease_ms.max(0));
        let held: Vec<(String, String)> = self
            .deliveries
            .iter()
            .flat_map(|(h, q)| q.values().map(move |d| (h, d)))
            .filter(|(_, d)| {
                d.status == DeliveryStatus::Pending
                    && d.lease.as_ref().is_some_and(|l| l.token == token && l.until_ms > now_ms)
            })
            .map(|(h, d)| (h.clone(), d.id.clone()))
            .collect();
        // A repeat (a retried proposal) answers what it holds, without extending the lease.
        let repeat = !held.is_empty();
        let chosen = if repeat {
            held
        } else {
            let mut due: Vec<(i64, String, String)> = self
                .due(now_ms, live)
                .map(|d| (d.next_attempt_at_ms.unwrap_or(now_ms), d.webhook_id.clone(), d.id.clone()))
                .collect();
            due.sort();
            due.truncate(usize::try_from(max).unwrap_or(usize::MAX));
            due.into_iter().map(|(_, h, d)| (h, d)).collect()
        };
        let mut leased = Vec::new();
        for (hook_id, id) in chosen {
            let Some(hook) = self.hooks.get(&hook_id) else { continue };
            let Some(d) = self.deliveries.get_mut(&hook_id).and_then(|q| q.get_mut(&id)) else { continue };
            if !repeat {
                d.lease = Some(Lease { worker: worker.clone(), token: token.clone(), until_ms });
            }
            leased.push(LeasedDelivery {
                delivery_id: d.id.clone(),
                webhook_id: hook_id.clone(),
                url: hook.url.clone(),
                secrets: hook.signing_secrets(now_ms),
                body: d.body.clone(),
                attempt: u32::try_from(d.attempts.len()).unwrap_or(u32::MAX).saturating_add(1),
            });
        }
        MetaCommandResult::Leased { deliveries: leased }
    }

    pub(super) fn record(
        &mut self,
        delivery_id: &str,
        token: &str,
        attempt: Attempt,
        outcome: AttemptOutcome,
    ) -> MetaCommandResult {
        let Some(hook_id) = self.deliveries.iter().find(|(_, q)| q.contains_key(delivery_id)).map(|(h, _)| h.clone())
        else {
            return Refused(Refusal::NotFound);
        };
        let Some(d) = self.deliveries.get_mut(&hook_id).and_then(|q| q.get_mut(delivery_id)) else {
            return Refused(Refusal::NotFound);
        };
        if d.attempts.len() < MAX_ATTEMPTS_KEPT {
            d.attempts.push(attempt.clone());
        }
        let holds = d.status == DeliveryStatus::Pending && d.lease.as_ref().is_some_and(|l| l.token == token);
        if !holds {
            return Done;
        }
        d.lease = None;
        let last = usize::try_from(attempt.attempt).unwrap_or(usize::MAX) > RETRY_DELAYS_MS.len();
        let mut gone = false;
        match outcome {
            AttemptOutcome::Succeeded => {
                d.status = DeliveryStatus::Succeeded;
                d.next_attempt_at_ms = None;
            }
            AttemptOutcome::Retry { next_attempt_at_ms: Some(at) } if !last => d.next_attempt_at_ms = Some(at),
            AttemptOutcome::Retry { .. } => {
                d.status = DeliveryStatus::Failed;
                d.next_attempt_at_ms = None;
            }
            AttemptOutcome::Gone => {
                d.status = DeliveryStatus::Failed;
                d.next_attempt_at_ms = None;
                gone = true;
            }
        }
        if gone {
            if let Some(hook) = self.hooks.get_mut(&hook_id) {
                hook.enabled = false;
                hook.disabled_reason = Some("gone".into());
            }
            // Nothing more is sent to a disabled endpoint.
            for d in self.deliveries.get_mut(&hook_id).into_iter().flat_map(|q| q.values_mut()) {
                if d.status == DeliveryStatus::Pending {
                    d.status = DeliveryStatus::Failed;
                    d.next_attempt_at_ms = None;
                    d.lease = None;
                }
            }
        }
        self.trim(&hook_id);
        Done
    }
}

/// Groups serialized events into bodies of at most [`MAX_BODY_BYTES`] (an event larger than
/// that alone goes alone).
fn chunks(events: Vec<String>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut size = 0usize;
    for e in events {
        if out.is_empty() || size.saturating_add(e.len()) > MAX_BODY_BYTES {
            out.push(Vec::new());
            size = 0;
        }
        size = size.saturating_add(e.len() + 1);
        if let Some(last) = out.last_mut() {
            last.push(e);
        }
    }
    out
}

impl MetaState {
    pub(super) fn create_webhook(&mut self, webhook: Webhook) -> MetaCommandResult {
        if !self.tenancy.project_of_org(webhook.project_id, webhook.org_id) {
            return Refused(Refusal::NotFound);
        }
        if self.webhooks.hooks.contains_key(&webhook.id) {
            return Done;
        }
        let siblings = self.webhooks.hooks.values().filter(|h| h.project_id == webhook.project_id).count();
        if siblings >= MAX_WEBHOOKS_PER_PROJECT {
            return Refused(Refusal::LimitReached);
        }
        if webhook.secrets.is_empty() {
            return Refused(Refusal::NotFound);
        }
        self.webhooks.hooks.insert(webhook.id.clone(), webhook);
        Done
    }

    fn own_webhook(&mut self, org_id: OrgId, project_id: ProjectId, id: &str) -> Option<&mut Webhook> {
        if !self.tenancy.project_of_org(project_id, org_id) {
            return None;
        }
        self.webhooks.hooks.get_mut(id).filter(|h| h.project_id == project_id && h.org_id == org_id)
    }

    pub(super) fn delete_webhook(&mut self, org_id: OrgId, project_id: ProjectId, id: &str) -> MetaCommandResult {
        if self.own_webhook(org_id, project_id, id).is_none() {
            return Refused(Refusal::NotFound);
        }
        self.webhooks.hooks.remove(id);
        self.webhooks.deliveries.remove(id);
        Done
    }

    pub(super) fn rotate_webhook_secret(
        &mut self,
        org_id: OrgId,
        project_id: ProjectId,
        id: &str,
        secret: SigningSecret,
        now_ms: i64,
    ) -> MetaCommandResult {
        let Some(hook) = self.own_webhook(org_id, project_id, id) else {
            return Refused(Refusal::NotFound);
        };
        if hook.secrets.first().is_some_and(|s| s.secret == secret) {
            return Done;
        }
        let mut secrets = vec![WebhookSecret { secret, expires_at_ms: None }];
        if let Some(current) = hook.secrets.first() {
            secrets.push(WebhookSecret {
                secret: current.secret.clone(),
                expires_at_ms: Some(now_ms.saturating_add(ROTATION_OVERLAP_MS)),
            });
        }
        hook.secrets = secrets;
        Done
    }

    pub(super) fn send_test_event(
        &mut self,
        org_id: OrgId,
        project_id: ProjectId,
        webhook_id: &str,
        event_id: &str,
        at_ms: i64,
    ) -> MetaCommandResult {
        if self.own_webhook(org_id, project_id, webhook_id).is_none() {
            return Refused(Refusal::NotFound);
        }
        if event_id.is_empty() || event_id.len() > MAX_EVENT_ID_LEN {
            return Refused(Refusal::NotFound);
        }
        let body = sextant_model::webhook::test_event_body(webhook_id, at_ms);
        self.webhooks.enqueue(webhook_id, delivery_id(event_id, webhook_id), TEST_EVENT, body, at_ms);
        Done
    }

    pub(super) fn lease_deliveries(
        &mut self,
        worker: String,
        token: String,
        now_ms: i64,
        lease_ms: i64,
        max: u32,
    ) -> MetaCommandResult {
        let tenancy = &self.tenancy;
        let live = |p: ProjectId| tenancy.project_live(p);
        self.webhooks.lease(worker, token, now_ms, lease_ms, max, &live)
    }

    /// Forgets published ids past their time, and the webhooks of deleted projects.
    pub(super) fn prune_webhooks(&mut self, now_ms: i64) {
        let tenancy = &self.tenancy;
        let live = |p: ProjectId| tenancy.project_live(p);
        self.webhooks.prune(now_ms, &live);
    }

    pub(super) fn due_deliveries(&self, now_ms: i64) -> u64 {
        let live = |p: ProjectId| self.tenancy.project_live(p);
        self.webhooks.due_count(now_ms, &live)
    }

    /// Customer events of a live project only.
    pub(super) fn publish_customer_events(
        &mut self,
        batch_id: String,
        org_id: OrgId,
        project_id: ProjectId,
        at_ms: i64,
        events: Vec<CustomerEvent>,
    ) -> MetaCommandResult {
        if !self.tenancy.project_of_org(project_id, org_id) {
            return Refused(Refusal::NotFound);
        }
        self.webhooks.publish_customer(batch_id, org_id, project_id, at_ms, events)
    }
}

#[cfg(test)]
mod tests {
    use sextant_model::webhook::*;

    use crate::meta::testing::*;

    fn hook(s: &mut MetaState, owner: &User, id: &str, events: &[&str]) -> Webhook {
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let w = Webhook {
            id: id.into(),
            org_id: owner.org_id,
            project_id: project,
            url: "https://hooks.test/x".into(),
            events: events.iter().map(|e| e.to_string()).collect(),
            enabled: true,
            created_at_ms: T0,
            secrets: vec![WebhookSecret { secret: SigningSecret("whsec_a".into()), expires_at_ms: None }],
            disabled_reason: None,
            dropped: 0,
        };
        assert_eq!(s.execute(MetaCommand::CreateWebhook { webhook: w.clone() }), Done);
        w
    }

    fn alert(owner: &User, id: &str) -> SystemEvent {
        SystemEvent {
            id: id.into(),
            name: SYSTEM_ALERT_TRIGGERED.into(),
            org_id: owner.org_id,
            project_id: None,
            occurred_at_ms: T0,
            payload: serde_json::json!({"rule": "r1"}),
            webhook_id: None,
        }
    }

    fn lease(s: &mut MetaState, token: &str, now_ms: i64) -> Vec<LeasedDelivery> {
        let cmd = MetaCommand::LeaseDeliveries {
            worker: "r".into(),
            token: token.into(),
            now_ms,
            lease_ms: LEASE_MS,
            max: 10,
        };
        match s.execute(cmd) {
            MetaCommandResult::Leased { deliveries } => deliveries,
            other => panic!("{other:?}"),
        }
    }

    fn attempt(n: u32, at_ms: i64, code: u16) -> Attempt {
        Attempt { attempt: n, at_ms, status_code: Some(code), error: None, duration_ms: 3, response_excerpt: None }
    }

    fn record(s: &mut MetaState, d: &LeasedDelivery, token: &str, at: Attempt, outcome: AttemptOutcome) {
        let cmd = MetaCommand::RecordDeliveryAttempt {
            delivery_id: d.delivery_id.clone(),
            token: token.into(),
            attempt: at,
            outcome,
        };
        assert_eq!(through_the_log(&cmd), cmd);
        assert_eq!(s.execute(cmd), Done);
    }

    #[test]
    fn a_system_event_reaches_each_subscribed_webhook_of_its_org_once() {
        let (mut s, owner) = state_with_user();
        let (mut s2, other) = state_with_user();
        hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        hook(&mut s, &owner, "w2", &["signup"]);
        hook(&mut s2, &other, "w3", &[SYSTEM_ALERT_TRIGGERED]);
        let cmd = MetaCommand::PublishSystemEvent { event: alert(&owner, "alert:r1:1") };
        assert_eq!(through_the_log(&cmd), cmd);
        assert_eq!(s.execute(cmd.clone()), Done);
        assert_eq!(s.execute(cmd), Done, "a repeat is harmless");
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let d: Vec<Delivery> = read(&s, &MetaQuery::WebhookDeliveries { project_id: project, webhook_id: "w1".into() });
        assert_eq!(d.len(), 1, "the repeat enqueued nothing");
        assert_eq!((d[0].event.as_str(), d[0].status), (SYSTEM_ALERT_TRIGGERED, DeliveryStatus::Pending));
        let none: Vec<Delivery> =
            read(&s, &MetaQuery::WebhookDeliveries { project_id: project, webhook_id: "w2".into() });
        assert!(none.is_empty());
        let foreign: Vec<Delivery> =
            read(&s, &MetaQuery::WebhookDeliveries { project_id: ProjectId::random(), webhook_id: "w1".into() });
        assert!(foreign.is_empty(), "another project cannot read it");
        let leased = lease(&mut s, "t1", T0);
        assert_eq!(leased.len(), 1);
        let body: serde_json::Value = serde_json::from_str(&leased[0].body).unwrap();
        assert_eq!(body["type"], SYSTEM_ALERT_TRIGGERED);
        assert_eq!(body["data"]["rule"], "r1");
        assert_eq!(leased[0].delivery_id, delivery_id("alert:r1:1", "w1"));
    }

    /// A webhook subscribed to `system.alert_triggered` in a project of another org, in `s`.
    fn foreign_hook(s: &mut MetaState, id: &str) -> Webhook {
        put_tenant(s, "t2", "Other", "pro", false);
        put_project(s, "p2", "t2", "other");
        let p = s.tenancy.projects.values().find(|p| p.key.as_deref() == Some("p2")).unwrap().clone();
        let w = Webhook {
            id: id.into(),
            org_id: p.org_id,
            project_id: p.id,
            url: "https://hooks.test/y".into(),
            events: vec![SYSTEM_ALERT_TRIGGERED.into()],
            enabled: true,
            created_at_ms: T0,
            secrets: vec![WebhookSecret { secret: SigningSecret("whsec_b".into()), expires_at_ms: None }],
            disabled_reason: None,
            dropped: 0,
        };
        assert_eq!(s.execute(MetaCommand::CreateWebhook { webhook: w.clone() }), Done);
        w
    }

    fn delivered(s: &MetaState, w: &Webhook) -> Vec<String> {
        let q = MetaQuery::WebhookDeliveries { project_id: w.project_id, webhook_id: w.id.clone() };
        read::<Vec<Delivery>>(s, &q).into_iter().map(|d| d.event).collect()
    }

    #[test]
    fn a_targeted_system_event_reaches_its_webhook_alone_whatever_it_subscribes_to() {
        let (mut s, owner) = state_with_user();
        let subscribed = hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        let target = hook(&mut s, &owner, "w2", &["signup"]);
        let event = SystemEvent { webhook_id: Some("w2".into()), ..alert(&owner, "alert:r1:1") };
        let cmd = MetaCommand::PublishSystemEvent { event };
        assert_eq!(through_the_log(&cmd), cmd);
        assert_eq!(s.execute(cmd), Done);
        assert_eq!(delivered(&s, &target), [SYSTEM_ALERT_TRIGGERED]);
        assert!(delivered(&s, &subscribed).is_empty(), "subscribers get only untargeted events");
        // Without a target, as before: every subscriber.
        s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, "alert:r1:2") });
        assert_eq!(delivered(&s, &subscribed), [SYSTEM_ALERT_TRIGGERED]);
        assert_eq!(delivered(&s, &target).len(), 1);
    }

    #[test]
    fn a_targeted_event_never_reaches_another_projects_or_a_disabled_or_deleted_webhook() {
        let (mut s, owner) = state_with_user();
        let subscribed = hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        let disabled = hook(&mut s, &owner, "w2", &[SYSTEM_ALERT_TRIGGERED]);
        s.webhooks.hooks.get_mut("w2").unwrap().enabled = false;
        let foreign = foreign_hook(&mut s, "wf");
        for (n, target) in ["wf", "w2", "deleted"].into_iter().enumerate() {
            let event = SystemEvent { webhook_id: Some(target.into()), ..alert(&owner, &format!("e{n}")) };
            assert_eq!(s.execute(MetaCommand::PublishSystemEvent { event }), Done);
        }
        for w in [&subscribed, &disabled, &foreign] {
            assert!(delivered(&s, w).is_empty(), "{} received a delivery", w.id);
        }
        // The other org's own events still reach it.
        let theirs = SystemEvent { org_id: foreign.org_id, webhook_id: Some("wf".into()), ..alert(&owner, "e9") };
        s.execute(MetaCommand::PublishSystemEvent { event: theirs });
        assert_eq!(delivered(&s, &foreign), [SYSTEM_ALERT_TRIGGERED]);
    }

    #[test]
    fn a_system_event_logged_before_targets_existed_reads_as_untargeted() {
        let (_, owner) = state_with_user();
        let mut json = serde_json::to_value(alert(&owner, "e1")).unwrap();
        json.as_object_mut().unwrap().remove("webhook_id");
        let old: SystemEvent = serde_json::from_value(json).unwrap();
        assert_eq!(old, alert(&owner, "e1"));
    }

    #[test]
    fn a_lease_keeps_a_delivery_from_other_workers_until_it_lapses() {
        let (mut s, owner) = state_with_user();
        hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, "e1") });
        let first = lease(&mut s, "t1", T0);
        assert_eq!(first.len(), 1);
        assert_eq!(lease(&mut s, "t1", T0 + 1), first, "a repeated lease answers the same");
        assert!(lease(&mut s, "t2", T0 + 1).is_empty(), "held by t1");
        // t1's worker crashed: after the lease another worker takes it.
        let second = lease(&mut s, "t2", T0 + LEASE_MS);
        assert_eq!(second.len(), 1);
        // The first worker's late result is recorded but decides nothing.
        record(&mut s, &first[0], "t1", attempt(1, T0 + LEASE_MS, 200), AttemptOutcome::Succeeded);
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let d: Vec<Delivery> = read(&s, &MetaQuery::WebhookDeliveries { project_id: project, webhook_id: "w1".into() });
        assert_eq!((d[0].status, d[0].attempts.len()), (DeliveryStatus::Pending, 1));
        record(&mut s, &second[0], "t2", attempt(2, T0 + LEASE_MS, 200), AttemptOutcome::Succeeded);
        let d: Vec<Delivery> = read(&s, &MetaQuery::WebhookDeliveries { project_id: project, webhook_id: "w1".into() });
        assert_eq!((d[0].status, d[0].attempts.len()), (DeliveryStatus::Succeeded, 2));
        assert_eq!(read::<u64>(&s, &MetaQuery::DueDeliveries { now_ms: T0 + 10 * LEASE_MS }), 0);
    }

    #[test]
    fn retries_wait_until_due_and_the_last_failure_fails_the_delivery() {
        let (mut s, owner) = state_with_user();
        hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, "e1") });
        let mut now = T0;
        for n in 1..=8u32 {
            let l = lease(&mut s, &format!("t{n}"), now);
            assert_eq!((l.len(), l[0].attempt), (1, n));
            let next = retry_delay_ms(n).map(|d| now + d);
            record(
                &mut s,
                &l[0],
                &format!("t{n}"),
                attempt(n, now, 500),
                AttemptOutcome::Retry { next_attempt_at_ms: next },
            );
            if let Some(next) = next {
                assert!(lease(&mut s, "early", next - 1).is_empty(), "not before it is due");
                now = next;
            }
        }
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let d: Vec<Delivery> = read(&s, &MetaQuery::WebhookDeliveries { project_id: project, webhook_id: "w1".into() });
        assert_eq!((d[0].status, d[0].attempts.len(), d[0].next_attempt_at_ms), (DeliveryStatus::Failed, 8, None));
    }

    #[test]
    fn a_410_disables_the_webhook_and_fails_what_was_pending() {
        let (mut s, owner) = state_with_user();
        hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, "e1") });
        s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, "e2") });
        let l = lease(&mut s, "t", T0);
        record(&mut s, &l[0], "t", attempt(1, T0, 410), AttemptOutcome::Gone);
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let hooks: Vec<WebhookInfo> = read(&s, &MetaQuery::Webhooks { project_id: project });
        assert_eq!((hooks[0].enabled, hooks[0].disabled_reason.as_deref()), (false, Some("gone")));
        let d: Vec<Delivery> = read(&s, &MetaQuery::WebhookDeliveries { project_id: project, webhook_id: "w1".into() });
        assert!(d.iter().all(|d| d.status == DeliveryStatus::Failed));
        assert!(view(&s).webhooks.is_empty(), "routers stop matching events for it");
        s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, "e3") });
        assert!(lease(&mut s, "t2", T0 + 1).is_empty());
    }

    #[test]
    fn customer_events_are_batched_per_webhook_by_name() {
        let (mut s, owner) = state_with_user();
        hook(&mut s, &owner, "w1", &["signup", "purchase"]);
        hook(&mut s, &owner, "w2", &["purchase"]);
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let ev =
            |name: &str, n: u32| CustomerEvent { name: name.into(), body: serde_json::json!({"event": name, "n": n}) };
        let cmd = MetaCommand::PublishCustomerEvents {
            batch_id: "b1".into(),
            org_id: owner.org_id,
            project_id: project,
            at_ms: T0,
            events: vec![ev("signup", 1), ev("pageview", 2), ev("purchase", 3)],
        };
        assert_eq!(through_the_log(&cmd), cmd);
        assert_eq!(s.execute(cmd.clone()), Done);
        assert_eq!(s.execute(cmd), Done);
        let wrong = MetaCommand::PublishCustomerEvents {
            batch_id: "b2".into(),
            org_id: OrgId::random(),
            project_id: project,
            at_ms: T0,
            events: vec![ev("signup", 1)],
        };
        assert_eq!(s.execute(wrong), Refused(Refusal::NotFound));
        let mut l = lease(&mut s, "t", T0);
        l.sort_by(|a, b| a.webhook_id.cmp(&b.webhook_id));
        assert_eq!(l.len(), 2);
        let names = |d: &LeasedDelivery| -> Vec<u64> {
            let v: serde_json::Value = serde_json::from_str(&d.body).unwrap();
            v["data"]["events"].as_array().unwrap().iter().map(|e| e["n"].as_u64().unwrap()).collect()
        };
        assert_eq!(names(&l[0]), [1, 3]);
        assert_eq!(names(&l[1]), [3]);
    }

    #[test]
    fn webhooks_belong_to_their_project_and_rotation_keeps_two_secrets() {
        let (mut s, owner) = state_with_user();
        let w = hook(&mut s, &owner, "w1", &["signup"]);
        let stranger = OrgId::random();
        let rotate = |org, secret: &str, now_ms| MetaCommand::RotateWebhookSecret {
            org_id: org,
            project_id: w.project_id,
            id: "w1".into(),
            secret: SigningSecret(secret.into()),
            now_ms,
        };
        assert_eq!(s.execute(rotate(stranger, "whsec_x", T0)), Refused(Refusal::NotFound));
        assert_eq!(s.execute(rotate(owner.org_id, "whsec_b", T0)), Done);
        let secrets =
            |s: &MetaState, at| s.webhooks.hooks["w1"].signing_secrets(at).into_iter().map(|s| s.0).collect::<Vec<_>>();
        assert_eq!(secrets(&s, T0 + 1), ["whsec_b", "whsec_a"]);
        assert_eq!(s.execute(rotate(owner.org_id, "whsec_c", T0 + 2)), Done);
        assert_eq!(secrets(&s, T0 + 3), ["whsec_c", "whsec_b"], "at most two");
        assert_eq!(secrets(&s, T0 + 2 + ROTATION_OVERLAP_MS), ["whsec_c"], "the previous one until the overlap ends");
        let delete = |org| MetaCommand::DeleteWebhook { org_id: org, project_id: w.project_id, id: "w1".into() };
        assert_eq!(s.execute(delete(stranger)), Refused(Refusal::NotFound));
        for i in 1..MAX_WEBHOOKS_PER_PROJECT {
            hook(&mut s, &owner, &format!("w{}", i + 1), &["x"]);
        }
        let extra = Webhook { id: "extra".into(), ..w.clone() };
        assert_eq!(s.execute(MetaCommand::CreateWebhook { webhook: extra }), Refused(Refusal::LimitReached));
        assert_eq!(s.execute(delete(owner.org_id)), Done);
        let left: Vec<WebhookInfo> = read(&s, &MetaQuery::Webhooks { project_id: w.project_id });
        assert_eq!(left.len(), MAX_WEBHOOKS_PER_PROJECT - 1);
        // Snapshots keep webhooks, their queue and the published ids.
        s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, "e1") });
        let mut bytes = Vec::new();
        s.snapshot_writer()(&mut bytes).unwrap();
        let mut again = MetaState::default();
        again.restore(&mut bytes.as_slice()).unwrap();
        assert_eq!(again.webhooks.hooks, s.webhooks.hooks);
        assert_eq!(again.webhooks.deliveries, s.webhooks.deliveries);
        assert_eq!(again.webhooks.published, s.webhooks.published);
    }

    #[test]
    fn a_test_event_goes_to_that_webhook_of_that_project_only() {
        let (mut s, owner) = state_with_user();
        let w = hook(&mut s, &owner, "w1", &["signup"]);
        let send = |org, project| MetaCommand::SendTestEvent {
            org_id: org,
            project_id: project,
            webhook_id: "w1".into(),
            event_id: "test:1".into(),
            at_ms: T0,
        };
        assert_eq!(s.execute(send(OrgId::random(), w.project_id)), Refused(Refusal::NotFound));
        assert_eq!(s.execute(send(owner.org_id, ProjectId::random())), Refused(Refusal::NotFound));
        let cmd = send(owner.org_id, w.project_id);
        assert_eq!(through_the_log(&cmd), cmd);
        assert_eq!(s.execute(cmd), Done);
        let l = lease(&mut s, "t", T0);
        let body: serde_json::Value = serde_json::from_str(&l[0].body).unwrap();
        assert_eq!((body["type"].as_str(), body["data"]["webhook_id"].as_str()), (Some(TEST_EVENT), Some("w1")));
    }

    #[test]
    fn published_ids_expire_and_webhooks_of_deleted_projects_go() {
        let (mut s, owner) = state_with_user();
        let w = hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, "e1") });
        s.execute(MetaCommand::RouterHeartbeat { router_id: "r".into(), at_ms: T0 + PUBLISHED_ID_TTL_MS - 1 });
        assert!(s.webhooks.published.contains_key("e1"));
        s.execute(MetaCommand::RouterHeartbeat { router_id: "r".into(), at_ms: T0 + PUBLISHED_ID_TTL_MS });
        assert!(!s.webhooks.published.contains_key("e1"), "its time is over");
        assert!(s.webhooks.hooks.contains_key("w1"));
        s.tenancy.deleted_projects.insert(w.project_id, T0);
        assert_eq!(read::<u64>(&s, &MetaQuery::DueDeliveries { now_ms: T0 }), 0, "nothing is sent for it");
        s.execute(MetaCommand::RouterHeartbeat { router_id: "r".into(), at_ms: T0 + PUBLISHED_ID_TTL_MS + 1 });
        assert!(!s.webhooks.hooks.contains_key("w1") && !s.webhooks.deliveries.contains_key("w1"));
    }

    #[test]
    fn a_full_queue_drops_new_deliveries_and_counts_them() {
        let (mut s, owner) = state_with_user();
        let w = hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        for i in 0..=MAX_PENDING_PER_WEBHOOK {
            s.execute(MetaCommand::PublishSystemEvent { event: alert(&owner, &format!("e{i}")) });
        }
        assert_eq!(s.webhooks.deliveries["w1"].len(), MAX_PENDING_PER_WEBHOOK);
        let hooks: Vec<WebhookInfo> = read(&s, &MetaQuery::Webhooks { project_id: w.project_id });
        assert_eq!(hooks[0].dropped, 1);
    }

    #[test]
    fn finished_history_is_bounded_per_webhook() {
        let (mut s, owner) = state_with_user();
        hook(&mut s, &owner, "w1", &[SYSTEM_ALERT_TRIGGERED]);
        for i in 0..MAX_FINISHED_PER_WEBHOOK + 5 {
            let mut e = alert(&owner, &format!("e{i}"));
            e.occurred_at_ms = T0 + i as i64;
            s.execute(MetaCommand::PublishSystemEvent { event: e });
            let l = lease(&mut s, &format!("t{i}"), T0 + i as i64);
            record(&mut s, &l[0], &format!("t{i}"), attempt(1, T0, 200), AttemptOutcome::Succeeded);
        }
        assert_eq!(s.webhooks.deliveries["w1"].len(), MAX_FINISHED_PER_WEBHOOK);
    }
}

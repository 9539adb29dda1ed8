//! Alert rules' state and the evaluator lease (docs/API.md, "Alerts"). The rules themselves
//! live with the managed objects (`Managed::alert_rules`, API rules beside AlertRule ones);
//! here are their states, moved only by the lease holder's observations, in log order, so a
//! router that takes over never records a transition twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sextant_model::alert::{
    parse_comparison, AlertEntry, AlertLease, AlertObservation, AlertStatus, AlertTransition, MAX_LEASE_MS,
    MAX_RULES_PER_PROJECT, MIN_LEASE_MS,
};
use sextant_model::meta::{AlertRule, MetaCommandResult, Refusal};
use sextant_model::webhook::SystemEvent;
use sextant_model::{OrgId, ProjectId};

use super::MetaState;
use MetaCommandResult::{Done, Refused};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Alerts {
    /// State of each rule, by rule id; a rule not in it is `ok` and never evaluated.
    #[serde(default)]
    pub(super) statuses: BTreeMap<String, AlertStatus>,
    #[serde(default)]
    pub(super) lease: Option<AlertLease>,
}

impl MetaState {
    pub(super) fn create_alert_rule(&mut self, org_id: OrgId, rule: AlertRule) -> MetaCommandResult {
        if !self.tenancy.project_of_org(rule.project_id, org_id) || rule.managed_by.is_some() {
            return Refused(Refusal::NotFound);
        }
        if self.managed.alert_rules.contains_key(&rule.id) {
            // A retried command: the first one stays.
            return Done;
        }
        let target_in_project =
            |w: &String| self.webhooks.hooks.get(w).is_some_and(|h| h.project_id == rule.project_id);
        if rule.webhook_id.as_ref().is_some_and(|w| !target_in_project(w)) {
            // The router checked; the webhook was deleted since.
            return Refused(Refusal::NotFound);
        }
        let siblings = self.managed.alert_rules.values().filter(|r| r.project_id == rule.project_id).count();
        if siblings >= MAX_RULES_PER_PROJECT {
            return Refused(Refusal::LimitReached);
        }
        self.managed.alert_rules.insert(rule.id.clone(), rule);
        Done
    }

    pub(super) fn delete_alert_rule(&mut self, org_id: OrgId, project_id: ProjectId, id: &str) -> MetaCommandResult {
        let Some(rule) = self.managed.alert_rules.get(id) else { return Refused(Refusal::NotFound) };
        if rule.project_id != project_id || !self.tenancy.project_of_org(project_id, org_id) {
            return Refused(Refusal::NotFound);
        }
        if rule.managed_by.is_some() {
            return Refused(Refusal::Managed);
        }
        self.managed.alert_rules.remove(id);
        self.alerts.statuses.remove(id);
        Done
    }

    pub(super) fn acquire_alert_lease(&mut self, holder: String, now_ms: i64, ttl_ms: i64) -> MetaCommandResult {
        let expires_at_ms = now_ms.saturating_add(ttl_ms.clamp(MIN_LEASE_MS, MAX_LEASE_MS));
        let token = match &self.alerts.lease {
            Some(l) if l.holder == holder && now_ms < l.expires_at_ms => l.token,
            Some(l) if now_ms < l.expires_at_ms => return Refused(Refusal::LeaseHeld),
            Some(l) => l.token + 1,
            None => 1,
        };
        self.alerts.lease = Some(AlertLease { holder, token, expires_at_ms });
        MetaCommandResult::Lease { token, expires_at_ms }
    }

    /// Ends `holder`'s lease now; its token stays, so the next holder gets a new one.
    pub(super) fn release_alert_lease(&mut self, holder: &str) -> MetaCommandResult {
        if let Some(l) = self.alerts.lease.as_mut().filter(|l| l.holder == holder) {
            l.expires_at_ms = i64::MIN;
        }
        Done
    }

    pub(super) fn record_alert_observations(
        &mut self,
        holder: &str,
        token: u64,
        now_ms: i64,
        observations: Vec<AlertObservation>,
    ) -> MetaCommandResult {
        if !self.alerts.lease.as_ref().is_some_and(|l| l.admits(holder, token)) {
            return Refused(Refusal::LeaseHeld);
        }
        let rules = &self.managed.alert_rules;
        self.alerts.statuses.retain(|id, _| rules.contains_key(id));
        for o in observations {
            let Some(rule) = self.managed.alert_rules.get(&o.rule_id) else { continue };
            let Some(comparison) = parse_comparison(&rule.comparison) else { continue };
            let status = self.alerts.statuses.entry(o.rule_id.clone()).or_default();
            if status.seq != o.seq || !rule.enabled {
                continue;
            }
            let for_ms = i64::from(rule.for_seconds) * 1000;
            if let Some(t) = status.observe(comparison, rule.threshold, for_ms, o.value, now_ms) {
                let rule = rule.clone();
                self.publish_alert_transition(&rule, &t);
            }
        }
        Done
    }

    /// The transition's system event, if it emits one, in the same command that recorded the
    /// transition: its id is the rule's and the transition's, so it is published exactly once.
    fn publish_alert_transition(&mut self, rule: &AlertRule, t: &AlertTransition) {
        let Some(name) = t.event_name() else { return };
        let Some(org_id) = self.tenancy.projects.get(&rule.project_id).map(|p| p.org_id) else { return };
        let payload = serde_json::json!({
            "rule_id": rule.id,
            "rule_name": rule.name,
            "project_id": rule.project_id,
            "metric": rule.metric,
            "comparison": rule.comparison,
            "threshold": rule.threshold,
            "window_minutes": rule.window_minutes,
            "state": t.to.as_str(),
            "previous_state": t.from.as_str(),
            "value": t.value,
            "transition": t.seq,
            "webhook_id": rule.webhook_id,
        });
        let event = SystemEvent {
            id: t.event_id(&rule.id),
            name: name.to_owned(),
            org_id,
            project_id: Some(rule.project_id),
            occurred_at_ms: t.at_ms,
            payload,
            webhook_id: rule.webhook_id.clone(),
        };
        self.webhooks.publish_system(event);
    }

    /// Rules with their state, oldest first.
    pub(super) fn alert_entries(&self, project_id: Option<ProjectId>, history: bool) -> Vec<AlertEntry> {
        let mut rules: Vec<&AlertRule> =
            self.managed.alert_rules.values().filter(|r| project_id.is_none_or(|p| r.project_id == p)).collect();
        rules.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        rules
            .into_iter()
            .map(|r| {
                let mut status = self.alerts.statuses.get(&r.id).cloned().unwrap_or_default();
                if !history {
                    status.history.clear();
                }
                AlertEntry { rule: r.clone(), status }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use sextant_model::alert::{AlertEntry, AlertObservation, AlertState};
    use sextant_model::meta::AlertRule;

    use crate::meta::testing::*;

    fn rule(id: &str, project_id: ProjectId) -> AlertRule {
        AlertRule {
            id: id.into(),
            project_id,
            name: "errors".into(),
            metric: "error_rate".into(),
            filter: Default::default(),
            comparison: ">".into(),
            threshold: 0.1,
            window_minutes: 5,
            enabled: true,
            created_at_ms: T0,
            updated_at_ms: T0,
            managed_by: None,
            key: None,
            for_seconds: 0,
            webhook_id: None,
        }
    }

    fn observe(holder: &str, token: u64, now_ms: i64, seq: u64, value: f64) -> MetaCommand {
        MetaCommand::RecordAlertObservations {
            holder: holder.into(),
            token,
            now_ms,
            observations: vec![AlertObservation { rule_id: "r1".into(), seq, value: Some(value) }],
        }
    }

    fn lease(holder: &str, now_ms: i64) -> MetaCommand {
        MetaCommand::AcquireAlertLease { holder: holder.into(), now_ms, ttl_ms: 10_000 }
    }

    fn entries(s: &MetaState, project: ProjectId) -> Vec<AlertEntry> {
        read(s, &MetaQuery::Alerts { project_id: Some(project), history: true })
    }

    #[test]
    fn rules_belong_to_a_project_of_the_org_and_managed_ones_cannot_be_deleted() {
        let (mut s, owner) = state_with_user();
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let other_org = OrgId::random();
        let create = |org_id, r| MetaCommand::CreateAlertRule { org_id, rule: r };
        assert_eq!(s.execute(create(other_org, rule("r1", project))), Refused(Refusal::NotFound));
        assert_eq!(s.execute(through_the_log(&create(owner.org_id, rule("r1", project)))), Done);
        assert_eq!(s.execute(create(owner.org_id, rule("r1", project))), Done, "a retry is harmless");
        assert_eq!(entries(&s, project).len(), 1);
        let delete = |org_id, id: &str| MetaCommand::DeleteAlertRule { org_id, project_id: project, id: id.into() };
        assert_eq!(s.execute(delete(other_org, "r1")), Refused(Refusal::NotFound));
        s.managed.alert_rules.get_mut("r1").unwrap().managed_by = Some(managed("AlertRule", "uid"));
        assert_eq!(s.execute(delete(owner.org_id, "r1")), Refused(Refusal::Managed));
        s.managed.alert_rules.get_mut("r1").unwrap().managed_by = None;
        assert_eq!(s.execute(delete(owner.org_id, "r1")), Done);
        assert!(entries(&s, project).is_empty());
    }

    #[test]
    fn the_lease_has_one_holder_until_it_expires_and_a_new_holder_gets_a_new_token() {
        let mut s = MetaState::default();
        let lease_of = |r| match r {
            MetaCommandResult::Lease { token, expires_at_ms } => (token, expires_at_ms),
            other => panic!("{other:?}"),
        };
        assert_eq!(lease_of(s.execute(lease("a", T0))), (1, T0 + 10_000));
        assert_eq!(s.execute(lease("b", T0 + 9_999)), Refused(Refusal::LeaseHeld));
        assert_eq!(lease_of(s.execute(lease("a", T0 + 5_000))), (1, T0 + 15_000), "renewed");
        assert_eq!(lease_of(s.execute(lease("b", T0 + 15_000))), (2, T0 + 25_000), "taken over");
        assert_eq!(s.execute(lease("a", T0 + 16_000)), Refused(Refusal::LeaseHeld));
        // Released by another router: nothing changes; by its holder: free at once.
        s.execute(MetaCommand::ReleaseAlertLease { holder: "a".into() });
        assert_eq!(s.execute(lease("a", T0 + 16_001)), Refused(Refusal::LeaseHeld));
        let release = MetaCommand::ReleaseAlertLease { holder: "b".into() };
        assert_eq!(s.execute(through_the_log(&release)), Done);
        assert_eq!(lease_of(s.execute(lease("a", T0 + 16_002))), (3, T0 + 26_002));
    }

    #[test]
    fn only_the_lease_holder_records_and_a_stale_sequence_changes_nothing() {
        let (mut s, owner) = state_with_user();
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        s.execute(MetaCommand::CreateAlertRule { org_id: owner.org_id, rule: rule("r1", project) });
        s.execute(lease("a", T0));
        assert_eq!(s.execute(observe("b", 1, T0 + 1, 0, 0.5)), Refused(Refusal::LeaseHeld));
        assert_eq!(s.execute(through_the_log(&observe("a", 1, T0 + 1, 0, 0.5))), Done);
        let got = &entries(&s, project)[0].status;
        assert_eq!((got.state, got.seq, got.last_value), (AlertState::Firing, 1, Some(0.5)));
        // "a" crashes after recording; "b" takes over with a view from before the record and
        // observes the same condition: the rule has moved on, nothing fires a second time.
        s.execute(lease("b", T0 + 10_000));
        assert_eq!(s.execute(observe("a", 1, T0 + 10_001, 1, 0.0)), Refused(Refusal::LeaseHeld), "fenced off");
        assert_eq!(s.execute(observe("b", 2, T0 + 10_001, 0, 0.6)), Done);
        assert_eq!(entries(&s, project)[0].status.seq, 1);
        assert_eq!(s.execute(observe("b", 2, T0 + 10_002, 1, 0.0)), Done);
        let got = &entries(&s, project)[0].status;
        assert_eq!((got.state, got.seq, got.history.len()), (AlertState::Ok, 2, 2));
        // A round that outlasted the lease still records while nobody has taken it over.
        assert_eq!(s.execute(observe("b", 2, T0 + 60_000, 2, 0.7)), Done);
        assert_eq!(entries(&s, project)[0].status.state, AlertState::Firing);
    }

    #[test]
    fn firing_and_resolving_each_enqueue_one_delivery_even_across_a_takeover() {
        use sextant_model::webhook::{Delivery, Webhook};
        let (mut s, owner) = state_with_user();
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        let hook: Webhook = serde_json::from_value(serde_json::json!({
            "id": "w1", "org_id": owner.org_id, "project_id": project, "url": "https://hooks.test/x",
            "events": ["system.alert_triggered", "system.alert_resolved"], "enabled": true, "created_at_ms": T0,
            "secrets": [{"secret": "whsec_a", "expires_at_ms": null}], "disabled_reason": null, "dropped": 0,
        }))
        .unwrap();
        assert_eq!(s.execute(MetaCommand::CreateWebhook { webhook: hook }), Done);
        s.execute(MetaCommand::CreateAlertRule { org_id: owner.org_id, rule: rule("r1", project) });
        s.execute(lease("a", T0));
        s.execute(observe("a", 1, T0 + 1, 0, 0.5));
        // The takeover's first round repeats what "a" saw, from the same stale sequence.
        s.execute(lease("b", T0 + 10_000));
        s.execute(observe("b", 2, T0 + 10_001, 0, 0.5));
        s.execute(observe("b", 2, T0 + 10_002, 1, 0.0));
        let deliveries: Vec<Delivery> =
            read(&s, &MetaQuery::WebhookDeliveries { project_id: project, webhook_id: "w1".into() });
        let mut events: Vec<&str> = deliveries.iter().map(|d| d.event.as_str()).collect();
        events.sort();
        assert_eq!(events, ["system.alert_resolved", "system.alert_triggered"]);
    }

    fn create_hook(s: &mut MetaState, org_id: OrgId, project: ProjectId, id: &str, events: &[&str]) {
        let hook: sextant_model::webhook::Webhook = serde_json::from_value(serde_json::json!({
            "id": id, "org_id": org_id, "project_id": project, "url": "https://hooks.test/x",
            "events": events, "enabled": true, "created_at_ms": T0,
            "secrets": [{"secret": "whsec_a", "expires_at_ms": null}], "disabled_reason": null, "dropped": 0,
        }))
        .unwrap();
        assert_eq!(s.execute(MetaCommand::CreateWebhook { webhook: hook }), Done);
    }

    #[test]
    fn a_rule_can_only_target_a_webhook_of_its_own_project() {
        let (mut s, owner) = state_with_user();
        let (mut theirs, stranger) = state_with_user();
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        // Their webhook "wf" exists in `theirs`; copy it into `s` as another project's.
        let their_project = theirs.tenancy.orgs[&stranger.org_id].default_project;
        create_hook(&mut theirs, stranger.org_id, their_project, "wf", &["system.alert_triggered"]);
        s.webhooks.hooks.insert("wf".into(), theirs.webhooks.hooks["wf"].clone());
        create_hook(&mut s, owner.org_id, project, "w1", &[]);
        let create = |id: &str, target: &str| MetaCommand::CreateAlertRule {
            org_id: owner.org_id,
            rule: AlertRule { webhook_id: Some(target.into()), ..rule(id, project) },
        };
        assert_eq!(s.execute(create("r1", "missing")), Refused(Refusal::NotFound));
        assert_eq!(s.execute(create("r2", "wf")), Refused(Refusal::NotFound));
        assert_eq!(s.execute(through_the_log(&create("r3", "w1"))), Done);
        let ids: Vec<String> = entries(&s, project).into_iter().map(|e| e.rule.id).collect();
        assert_eq!(ids, ["r3"]);
    }

    #[test]
    fn a_rule_with_a_target_notifies_that_webhook_alone() {
        use sextant_model::webhook::Delivery;
        let (mut s, owner) = state_with_user();
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        create_hook(&mut s, owner.org_id, project, "w1", &["system.alert_triggered", "system.alert_resolved"]);
        create_hook(&mut s, owner.org_id, project, "pager", &[]);
        let r1 = AlertRule { webhook_id: Some("pager".into()), ..rule("r1", project) };
        assert_eq!(s.execute(MetaCommand::CreateAlertRule { org_id: owner.org_id, rule: r1 }), Done);
        s.execute(lease("a", T0));
        s.execute(observe("a", 1, T0 + 1, 0, 0.5));
        s.execute(observe("a", 1, T0 + 2, 1, 0.0));
        let events = |id: &str| -> Vec<String> {
            let q = MetaQuery::WebhookDeliveries { project_id: project, webhook_id: id.into() };
            let mut e: Vec<String> = read::<Vec<Delivery>>(&s, &q).into_iter().map(|d| d.event).collect();
            e.sort();
            e
        };
        assert_eq!(events("pager"), ["system.alert_resolved", "system.alert_triggered"]);
        assert!(events("w1").is_empty(), "a subscriber of the project gets no targeted alert");
    }

    #[test]
    fn alert_state_survives_a_snapshot() {
        let (mut s, owner) = state_with_user();
        let project = s.tenancy.orgs[&owner.org_id].default_project;
        s.execute(MetaCommand::CreateAlertRule { org_id: owner.org_id, rule: rule("r1", project) });
        s.execute(lease("a", T0));
        s.execute(observe("a", 1, T0 + 1, 0, 0.5));
        let mut bytes = Vec::new();
        s.snapshot_writer()(&mut bytes).unwrap();
        let mut restored = MetaState::default();
        restored.restore(&mut bytes.as_slice()).unwrap();
        assert_eq!(entries(&restored, project), entries(&s, project));
        assert_eq!(restored.alerts.lease, s.alerts.lease);
    }
}

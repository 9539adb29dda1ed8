//! The meta group's state: orgs, users, sessions, invitations, projects, credential hashes,
//! plans and quotas, objects managed by the operator, cohorts, router heartbeats, the
//! hash-partition table and storage membership. Small, so it is snapshotted whole as JSON
//! (`snapshot`). Every rule that concurrent requests could race on (unique emails, limits,
//! refresh-token rotation) is decided here, in log order.
//!
//! One module per aggregate, each owning its maps and the commands that change them;
//! `execute` only dispatches. Commands that span aggregates (deleting a tenant, signing up)
//! live with the aggregate that starts them.

mod accounts;
mod alerts;
mod billing;
mod cohorts;
mod managed;
pub mod membership;
mod routers;
mod sessions;
mod snapshot;
mod spread;
mod subscriptions;
mod tenancy;
#[cfg(test)]
mod testing;
mod usage;
mod webhooks;

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use sextant_model::cohort::Cohort;
use sextant_model::meta::{
    ClusterView, MetaCommand, MetaCommandResult, MetaQuery, MetaView, OrgMembers, OrgTrial, User,
};
use subtle::ConstantTimeEq;

use crate::state_machine::GroupState;
use crate::types::{Command, CommandResponse};
use accounts::{Accounts, Joiner};
use alerts::Alerts;
use billing::Billing;
use cohorts::Cohorts;
use managed::{AlertRuleSpec, Managed, QuotaSpec};
use membership::ClusterState;
use routers::Routers;
use sessions::Sessions;
use snapshot::MetaSnapshot;
use tenancy::Tenancy;
use usage::Metering;
use webhooks::Webhooks;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "MetaSnapshot", into = "MetaSnapshot")]
pub struct MetaState {
    /// Number of commands applied, so routers can tell a newer view from an older one.
    version: u64,
    /// Data group of each hash partition, set at bootstrap.
    partition_groups: Vec<u64>,
    tenancy: Tenancy,
    accounts: Accounts,
    sessions: Sessions,
    billing: Billing,
    managed: Managed,
    routers: Routers,
    cohorts: Cohorts,
    /// Storage nodes and replica placement.
    cluster: ClusterState,
    /// Usage reported by the data groups.
    metering: Metering,
    /// Webhooks, their delivery queue and the ids of published events.
    webhooks: Webhooks,
    /// Alert rules' states and the evaluator lease.
    alerts: Alerts,
}

/// The answer to a [`MetaQuery`]: serialized as the bare value, which is what the router
/// decodes (a `MetaView`, an `Option<User>`, `OrgMembers`, a `Vec<Cohort>`, a `ClusterView`).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum MetaAnswer {
    View(Box<MetaView>),
    User(Option<User>),
    OrgMembers(OrgMembers),
    Cohorts(Vec<Cohort>),
    Cluster(ClusterView),
    Usage(Vec<sextant_model::usage::UsageRecord>),
    BillingAccount(Option<Box<sextant_model::subscription::BillingAccount>>),
    Webhooks(Vec<sextant_model::webhook::WebhookInfo>),
    Deliveries(Vec<sextant_model::webhook::Delivery>),
    Count(u64),
    Alerts(Vec<sextant_model::alert::AlertEntry>),
}

fn same_hash(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

use MetaCommandResult::Done;

impl MetaState {
    fn execute(&mut self, command: MetaCommand) -> MetaCommandResult {
        self.version += 1;
        match command {
            MetaCommand::Bootstrap { org, user, project, credentials, partitions } => {
                self.bootstrap(org, user, project, credentials, partitions)
            }
            MetaCommand::SeedPlans { plans } => {
                self.billing.seed(plans);
                Done
            }
            MetaCommand::Signup { org, user, project, credentials, session, trial_ends_at_ms } => {
                self.signup(org, user, project, credentials, session, trial_ends_at_ms)
            }
            MetaCommand::StartSession { session } => self.start_session(session),
            MetaCommand::RotateSession { family, presented_sha256, new_sha256, now_ms } => {
                self.rotate(&family, &presented_sha256, new_sha256, now_ms)
            }
            MetaCommand::EndSession { family, presented_sha256, now_ms } => {
                self.sessions.end(&family, &presented_sha256, now_ms)
            }
            MetaCommand::Invite { invite } => self.accounts.invite(invite),
            MetaCommand::AcceptInvite { invite_id, token_sha256, user_id, name, password_hash, session, now_ms } => {
                let joiner = Joiner { user_id, name, password_hash, session };
                self.accept_invite(&invite_id, &token_sha256, joiner, now_ms)
            }
            MetaCommand::RemoveMember { org_id, user_id, now_ms } => self.remove_member(org_id, user_id, now_ms),
            MetaCommand::CreateProject { project, credentials } => self.tenancy.create_project(project, credentials),
            MetaCommand::CreateCredential { org_id, credential } => self.tenancy.create_credential(org_id, credential),
            MetaCommand::RevokeCredential { org_id, id, kind } => self.revoke_credential(org_id, &id, kind),
            MetaCommand::RevokeInvite { org_id, invite_id } => self.accounts.revoke_invite(org_id, &invite_id),
            MetaCommand::PutPlan { plan } => {
                self.billing.put_plan(plan);
                Done
            }
            MetaCommand::PutQuota { quota } => self.put_quota(quota),
            MetaCommand::DeleteQuota { id } => self.delete_quota(&id),
            MetaCommand::RouterLeft { router_id } => {
                self.routers.left(&router_id);
                Done
            }
            MetaCommand::CreateCohort { org_id, cohort } => self.create_cohort(org_id, cohort),
            MetaCommand::RouterHeartbeat { router_id, at_ms } => {
                self.routers.heartbeat(router_id, at_ms);
                self.prune(at_ms);
                Done
            }
            MetaCommand::PutTenant { key, org, owner_email, suspended, managed_by } => {
                self.put_tenant(key, org, owner_email, suspended, managed_by)
            }
            MetaCommand::DeleteTenant { key, now_ms } => self.delete_tenant(&key, now_ms),
            MetaCommand::PutManagedProject { key, tenant_key, project, managed_by } => {
                self.put_managed_project(key, &tenant_key, project, managed_by)
            }
            MetaCommand::IssueManagedCredentials { key, credentials } => {
                self.issue_managed_credentials(key, credentials)
            }
            MetaCommand::DeleteManagedProject { key, now_ms } => self.delete_managed_project(&key, now_ms),
            MetaCommand::PutManagedPlan { plan, display_name, price, managed_by } => {
                self.put_managed_plan(plan, display_name, price, managed_by)
            }
            MetaCommand::DeleteManagedPlan { name } => self.delete_managed_plan(name),
            MetaCommand::PutManagedQuota {
                key,
                tenant_key,
                project_key,
                monthly_bytes,
                monthly_events,
                ingest_rps,
                hard,
                managed_by,
            } => self.put_managed_quota(QuotaSpec {
                key,
                tenant_key,
                project_key,
                monthly_bytes,
                monthly_events,
                ingest_rps,
                hard,
                managed_by,
            }),
            MetaCommand::DeleteManagedQuota { key } => self.delete_managed_quota(&key),
            MetaCommand::PutManagedAlertRule {
                key,
                project_key,
                id,
                name,
                metric,
                filter,
                comparison,
                threshold,
                window_minutes,
                enabled,
                now_ms,
                managed_by,
                for_seconds,
                webhook_id,
            } => self.put_managed_alert_rule(AlertRuleSpec {
                key,
                project_key,
                id,
                name,
                metric,
                filter,
                comparison,
                threshold,
                window_minutes,
                enabled,
                now_ms,
                managed_by,
                for_seconds,
                webhook_id,
            }),
            MetaCommand::DeleteManagedAlertRule { key } => self.delete_managed_alert_rule(&key),
            MetaCommand::InviteTenantOwner { key, invite } => self.invite_tenant_owner(&key, invite),
            MetaCommand::RegisterNode { id, address, member, replication_factor, incarnation, zone } => {
                self.cluster.register(id, address, member, replication_factor, incarnation, zone)
            }
            MetaCommand::ReplaceNode { id } => self.cluster.replace(id),
            MetaCommand::RemoveNode { id } => self.cluster.remove(id),
            MetaCommand::SetMembers { addresses } => self.cluster.set_members(&addresses),
            MetaCommand::DrainNode { address } => self.cluster.drain(&address),
            MetaCommand::ReportReplicas { group, voters, log_index } => self.cluster.report(group, voters, log_index),
            MetaCommand::ReportUsage { group, applied_index, usage } => {
                self.metering.report(group, applied_index, usage)
            }
            MetaCommand::StartCheckout { org_id, checkout_id, plan, provider, now_ms } => {
                self.start_checkout(org_id, checkout_id, plan, provider, now_ms)
            }
            MetaCommand::ApplyProviderEvent { event_id, created_ms, provider, change, now_ms } => {
                self.apply_provider_event(event_id, created_ms, provider, change, now_ms)
            }
            MetaCommand::CancelSubscription { org_id, now_ms } => self.cancel_subscription(org_id, now_ms),
            MetaCommand::RemovePaymentMethod { org_id, card_id, now_ms } => {
                self.remove_payment_method(org_id, &card_id, now_ms)
            }
            MetaCommand::RecordRenewal { org_id, period_start_ms, payment, now_ms } => {
                self.record_renewal(org_id, period_start_ms, payment, now_ms)
            }
            MetaCommand::EndTrial { org_id, ends_at_ms, now_ms } => self.end_trial(org_id, ends_at_ms, now_ms),
            MetaCommand::EndSubscription { org_id, period_end_ms, now_ms } => {
                self.end_subscription(org_id, period_end_ms, now_ms)
            }
            MetaCommand::PublishSystemEvent { event } => self.webhooks.publish_system(event),
            MetaCommand::CreateWebhook { webhook } => self.create_webhook(webhook),
            MetaCommand::DeleteWebhook { org_id, project_id, id } => self.delete_webhook(org_id, project_id, &id),
            MetaCommand::RotateWebhookSecret { org_id, project_id, id, secret, now_ms } => {
                self.rotate_webhook_secret(org_id, project_id, &id, secret, now_ms)
            }
            MetaCommand::PublishCustomerEvents { batch_id, org_id, project_id, at_ms, events } => {
                self.publish_customer_events(batch_id, org_id, project_id, at_ms, events)
            }
            MetaCommand::LeaseDeliveries { worker, token, now_ms, lease_ms, max } => {
                self.lease_deliveries(worker, token, now_ms, lease_ms, max)
            }
            MetaCommand::RecordDeliveryAttempt { delivery_id, token, attempt, outcome } => {
                self.webhooks.record(&delivery_id, &token, attempt, outcome)
            }
            MetaCommand::SendTestEvent { org_id, project_id, webhook_id, event_id, at_ms } => {
                self.send_test_event(org_id, project_id, &webhook_id, &event_id, at_ms)
            }
            MetaCommand::CreateAlertRule { org_id, rule } => self.create_alert_rule(org_id, rule),
            MetaCommand::DeleteAlertRule { org_id, project_id, id } => self.delete_alert_rule(org_id, project_id, &id),
            MetaCommand::AcquireAlertLease { holder, now_ms, ttl_ms } => {
                self.acquire_alert_lease(holder, now_ms, ttl_ms)
            }
            MetaCommand::RecordAlertObservations { holder, token, now_ms, observations } => {
                self.record_alert_observations(&holder, token, now_ms, observations)
            }
            MetaCommand::ReleaseAlertLease { holder } => self.release_alert_lease(&holder),
        }
    }

    /// Drops what can no longer matter at `now_ms`.
    fn prune(&mut self, now_ms: i64) {
        self.sessions.prune(now_ms);
        self.accounts.prune(now_ms);
        self.routers.prune(now_ms);
        self.prune_webhooks(now_ms);
    }

    /// Everything a router caches.
    fn view(&self) -> MetaView {
        let managed = &self.managed;
        MetaView {
            version: self.version,
            partitions: self.partition_groups.clone(),
            orgs: self.tenancy.orgs.values().cloned().collect(),
            projects: self.tenancy.projects.values().cloned().collect(),
            credentials: self.tenancy.credentials.values().cloned().collect(),
            members: self.accounts.users.values().map(User::member).collect(),
            removed_users: self.accounts.removed_users.keys().copied().collect(),
            revoked_sessions: self.sessions.revoked(),
            routers: self.routers.view(),
            plans: self.billing.plans.values().cloned().collect(),
            quotas: self.billing.quotas.values().cloned().collect(),
            trials: self.tenancy.trials.iter().map(|(o, end)| OrgTrial { org_id: *o, ends_at_ms: *end }).collect(),
            alert_rules: managed.alert_rules.values().cloned().collect(),
            deleted_projects: self.tenancy.deleted_projects.keys().copied().collect(),
            usage: self.metering.recent(),
            usage_indexes: self.metering.indexes(),
            billing: self.billing.accounts.values().map(|a| a.summary()).collect(),
            webhooks: self.webhooks.enabled(),
        }
    }

    pub fn query(&self, query: &MetaQuery) -> MetaAnswer {
        match query {
            MetaQuery::View => MetaAnswer::View(Box::new(self.view())),
            MetaQuery::UserByEmail { email } => MetaAnswer::User(self.accounts.user_by_email(email)),
            MetaQuery::OrgMembers { org_id } => MetaAnswer::OrgMembers(self.accounts.org_members(*org_id)),
            MetaQuery::Cohorts { project_id } => MetaAnswer::Cohorts(self.cohorts.of_project(*project_id)),
            MetaQuery::Cluster => MetaAnswer::Cluster(self.cluster.view()),
            MetaQuery::Usage { project_ids } => MetaAnswer::Usage(self.metering.records(Some(project_ids))),
            MetaQuery::BillingAccount { org_id } => {
                MetaAnswer::BillingAccount(self.billing.accounts.get(org_id).cloned().map(Box::new))
            }
            MetaQuery::Webhooks { project_id } => MetaAnswer::Webhooks(self.webhooks.of_project(*project_id)),
            MetaQuery::WebhookDeliveries { project_id, webhook_id } => {
                MetaAnswer::Deliveries(self.webhooks.deliveries_of(*project_id, webhook_id))
            }
            MetaQuery::DueDeliveries { now_ms } => MetaAnswer::Count(self.due_deliveries(*now_ms)),
            MetaQuery::Alerts { project_id, history } => MetaAnswer::Alerts(self.alert_entries(*project_id, *history)),
        }
    }
}

impl GroupState for MetaState {
    fn apply(&mut self, _index: u64, command: Command) -> CommandResponse {
        match command {
            Command::Meta(cmd) => {
                let result = self.execute(cmd);
                CommandResponse::Meta(serde_json::to_vec(&result).unwrap_or_default())
            }
            _ => CommandResponse::Rejected("data command sent to the meta group".into()),
        }
    }

    fn snapshot_writer(&self) -> Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync> {
        let copy = MetaSnapshot::from(self.clone());
        Box::new(move |w: &mut dyn Write| serde_json::to_writer(w, &copy).map_err(io::Error::other))
    }

    fn restore(&mut self, input: &mut dyn Read) -> io::Result<()> {
        *self = serde_json::from_reader::<_, MetaSnapshot>(input).map_err(io::Error::other)?.into();
        Ok(())
    }
}

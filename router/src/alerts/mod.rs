//! Alerts (docs/API.md, "Alerts"): the rules' endpoints (`api`), their metrics (`measure`)
//! and the evaluator every router runs. Only the router holding the evaluator lease in meta
//! evaluates; it renews the lease every interval, and its results are recorded only under
//! the lease's token, so a router whose lease was taken over (paused, partitioned) records
//! nothing.

pub mod api;
pub mod measure;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use sextant_model::alert::{parse_metric, AlertEntry, AlertObservation};
use sextant_model::meta::{MetaCommand, MetaCommandResult, MetaQuery, Refusal};

use crate::http::error::ApiError;
use crate::AppState;

/// Rules measured at once by the evaluator.
const CONCURRENT_RULES: usize = 8;

/// How long a lease lasts: two intervals, so one late renewal does not hand it over. A
/// holder that dies is replaced within three intervals of its last renewal (the lease runs
/// out, and every other router tries once per interval).
pub fn lease_ttl(interval: Duration) -> Duration {
    interval.saturating_mul(2)
}

/// What one evaluation round did.
#[derive(Debug, PartialEq, Eq)]
pub enum Round {
    /// No rule is enabled: nothing was written to meta.
    Idle,
    /// Another router holds the lease.
    NotHolder,
    /// Rules measured and recorded under the lease's `token`.
    Evaluated { token: u64, rules: usize },
    /// Another router took the lease while this one measured: nothing was recorded.
    Fenced,
}

async fn enabled_rules(app: &AppState) -> Result<Vec<AlertEntry>, ApiError> {
    let all: Vec<AlertEntry> = app.cluster.meta_read(&MetaQuery::Alerts { project_id: None, history: false }).await?;
    Ok(all.into_iter().filter(|e| e.rule.enabled).collect())
}

/// Evaluates every enabled rule once if this router holds (or can take) the lease.
pub async fn evaluate_once(app: &AppState) -> Result<Round, ApiError> {
    // Read first, so that a cluster without rules writes nothing to the meta log.
    if enabled_rules(app).await?.is_empty() {
        return Ok(Round::Idle);
    }
    let ttl_ms = i64::try_from(lease_ttl(app.config.alert_interval).as_millis()).unwrap_or(i64::MAX);
    let acquire =
        MetaCommand::AcquireAlertLease { holder: app.router_id.clone(), now_ms: app.clock.now_millis(), ttl_ms };
    let token = match app.cluster.meta_write::<MetaCommandResult>(&acquire).await? {
        MetaCommandResult::Lease { token, .. } => token,
        MetaCommandResult::Refused(Refusal::LeaseHeld) => return Ok(Round::NotHolder),
        other => return Err(ApiError::Internal(format!("unexpected answer to the alert lease: {other:?}"))),
    };
    // Read again under the lease: the sequences are those its previous holder left.
    let entries = enabled_rules(app).await?;
    let now_ns = app.clock.now_nanos();
    let observations: Vec<AlertObservation> = futures::stream::iter(entries)
        .map(|e| async move {
            let metric = parse_metric(&e.rule.metric)?;
            match measure::measure(app, &e.rule, metric, now_ns).await {
                Ok(value) => Some(AlertObservation { rule_id: e.rule.id, seq: e.status.seq, value }),
                Err(err) => {
                    // Not recorded: the rule keeps its state until a round can measure it.
                    tracing::warn!(rule = %e.rule.id, error = %err, "alert rule not evaluated");
                    None
                }
            }
        })
        .buffer_unordered(CONCURRENT_RULES)
        .filter_map(|o| async move { o })
        .collect()
        .await;
    let rules = observations.len();
    let record = MetaCommand::RecordAlertObservations {
        holder: app.router_id.clone(),
        token,
        now_ms: app.clock.now_millis(),
        observations,
    };
    match app.cluster.meta_write::<MetaCommandResult>(&record).await? {
        MetaCommandResult::Done => Ok(Round::Evaluated { token, rules }),
        MetaCommandResult::Refused(Refusal::LeaseHeld) => Ok(Round::Fenced),
        other => Err(ApiError::Internal(format!("unexpected answer to alert results: {other:?}"))),
    }
}

/// Gives the lease up if this router holds it (a router shutting down), so another takes it at
/// its next round.
pub async fn release(app: &AppState) -> Result<(), ApiError> {
    let command = MetaCommand::ReleaseAlertLease { holder: app.router_id.clone() };
    app.cluster.meta_write::<MetaCommandResult>(&command).await?;
    Ok(())
}

/// Runs [`evaluate_once`] every `alert_interval`.
pub fn spawn_evaluator(app: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(app.config.alert_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !app.cluster.ready() {
                continue;
            }
            match evaluate_once(&app).await {
                Ok(Round::Evaluated { token, rules }) => {
                    app.metrics.alert_rounds.inc();
                    tracing::debug!(token, rules, "alert rules evaluated");
                }
                Ok(Round::Fenced) => tracing::warn!("alert evaluator lease taken over during a round; results dropped"),
                Ok(Round::NotHolder | Round::Idle) => {}
                Err(e) => tracing::warn!(error = %e, "alert evaluation round failed"),
            }
        }
    })
}

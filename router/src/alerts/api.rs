//! `GET/POST /api/v1/alerts`, `GET/DELETE /api/v1/alerts/{id}` (docs/API.md, "Alerts"): rules
//! of the session's project, stored in meta with their state. Rules of AlertRule resources are
//! listed like the others and cannot be deleted here (409).

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sextant_model::admin::{AlertMetric, AlertRuleResponse, Comparison};
use sextant_model::alert::{AlertEntry, AlertTransition, MAX_FILTER_CHARS, MAX_FOR_SECONDS, MAX_WINDOW_MINUTES};
use sextant_model::identity::{normalize_name, Problems};
use sextant_model::ingest::parse_level;
use sextant_model::meta::{AlertFilter, AlertRule, ManagedBy, MetaCommand, MetaQuery};
use sextant_model::text::LogQuery;
use sextant_model::webhook::WebhookInfo;
use sextant_model::ProjectId;

use crate::http::error::{expect_done, ApiError};
use crate::http::listing::{Listed, Page};
use crate::identity::account::time_json;
use crate::identity::auth::Session;
use crate::AppState;

/// A rule body is a few hundred bytes; filters are bounded by [`MAX_FILTER_CHARS`].
pub const MAX_ALERT_BODY: usize = 16 * 1024;
/// Longest rule id accepted in a path (ids are 32 hex digits, or a resource's UUID).
const MAX_ID_CHARS: usize = 64;

/// `POST /api/v1/alerts`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertRuleInput {
    pub name: String,
    pub metric: AlertMetric,
    #[serde(default, deserialize_with = "AlertFilter::deserialize_strict")]
    pub filter: AlertFilter,
    pub comparison: Comparison,
    pub threshold: f64,
    pub window_minutes: u32,
    #[serde(default)]
    pub for_seconds: u32,
    #[serde(default = "enabled")]
    pub enabled: bool,
    #[serde(default)]
    pub webhook_id: Option<String>,
}

fn enabled() -> bool {
    true
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TransitionJson {
    pub seq: u64,
    pub from: &'static str,
    pub to: &'static str,
    pub at: String,
    pub value: Option<f64>,
}

fn transition_json(t: &AlertTransition) -> TransitionJson {
    TransitionJson { seq: t.seq, from: t.from.as_str(), to: t.to.as_str(), at: time_json(t.at_ms), value: t.value }
}

/// A rule with its state; `history` only in `GET /api/v1/alerts/{id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertJson {
    pub id: String,
    pub name: String,
    pub metric: String,
    pub filter: AlertFilter,
    pub comparison: String,
    pub threshold: f64,
    pub window_minutes: u32,
    pub for_seconds: u32,
    pub enabled: bool,
    pub webhook_id: Option<String>,
    pub state: &'static str,
    pub last_value: Option<f64>,
    pub last_evaluated_at: Option<String>,
    pub managed_by: Option<ManagedBy>,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<TransitionJson>>,
}

fn alert_json(e: &AlertEntry, history: bool) -> AlertJson {
    let (r, s) = (&e.rule, &e.status);
    AlertJson {
        id: r.id.clone(),
        name: r.name.clone(),
        metric: r.metric.clone(),
        filter: r.filter.clone(),
        comparison: r.comparison.clone(),
        threshold: r.threshold,
        window_minutes: r.window_minutes,
        for_seconds: r.for_seconds,
        enabled: r.enabled,
        webhook_id: r.webhook_id.clone(),
        state: s.state.as_str(),
        last_value: s.last_value,
        last_evaluated_at: s.last_evaluated_at_ms.map(time_json),
        managed_by: r.managed_by.clone(),
        created_at: time_json(r.created_at_ms),
        history: history.then(|| s.history.iter().map(transition_json).collect()),
    }
}

async fn project_alerts(app: &AppState, project: ProjectId, history: bool) -> Result<Vec<AlertEntry>, ApiError> {
    Ok(app.cluster.meta_read(&MetaQuery::Alerts { project_id: Some(project), history }).await?)
}

/// A filter value, trimmed (empty: no filter); more than [`MAX_FILTER_CHARS`] or a control
/// character is a problem.
pub fn filter_value(problems: &mut Problems, field: &str, v: Option<String>) -> Option<String> {
    let v = v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())?;
    let ok = v.chars().count() <= MAX_FILTER_CHARS && !v.chars().any(char::is_control);
    problems.check(field, if ok { Ok(()) } else { Err("must be at most 1000 characters, without control characters") });
    Some(v)
}

/// `f` with its values checked: bounded, levels that exist, a log search that parses. Rules of
/// the API and of AlertRule resources alike.
pub fn checked_filter(problems: &mut Problems, f: AlertFilter) -> AlertFilter {
    let filter = AlertFilter {
        service: filter_value(problems, "filter.service", f.service),
        operation: filter_value(problems, "filter.operation", f.operation),
        level: filter_value(problems, "filter.level", f.level),
        query: filter_value(problems, "filter.query", f.query),
        hostname: filter_value(problems, "filter.hostname", f.hostname),
        event: filter_value(problems, "filter.event", f.event),
    };
    if let Some(levels) = &filter.level {
        let ok = levels.split(',').map(str::trim).all(|l| parse_level(l).is_some());
        problems
            .check("filter.level", if ok { Ok(()) } else { Err("must list TRACE, DEBUG, INFO, WARN, ERROR or FATAL") });
    }
    if let Some(q) = &filter.query {
        problems.check("filter.query", LogQuery::parse(q).map(|_| ()).map_err(|_| "is not a valid log search"));
    }
    filter
}

/// The rule `input` describes, or every problem with it.
pub fn validate(input: AlertRuleInput, project_id: ProjectId, id: String, now_ms: i64) -> Result<AlertRule, ApiError> {
    let mut problems = Problems::default();
    let name = problems.check("name", normalize_name(&input.name));
    problems.check("threshold", if input.threshold.is_finite() { Ok(()) } else { Err("must be a finite number") });
    problems.check(
        "window_minutes",
        if (1..=MAX_WINDOW_MINUTES).contains(&input.window_minutes) { Ok(()) } else { Err("must be from 1 to 1440") },
    );
    problems.check(
        "for_seconds",
        if input.for_seconds <= MAX_FOR_SECONDS { Ok(()) } else { Err("must be from 0 to 86400") },
    );
    let filter = checked_filter(&mut problems, input.filter);
    let webhook_id = filter_value(&mut problems, "webhook_id", input.webhook_id);
    problems.into_result().map_err(ApiError::invalid_fields)?;
    Ok(AlertRule {
        id,
        project_id,
        name: name.unwrap_or_default(),
        metric: input.metric.as_str().to_owned(),
        filter,
        comparison: input.comparison.as_str().to_owned(),
        threshold: input.threshold,
        window_minutes: input.window_minutes,
        enabled: input.enabled,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        managed_by: None,
        key: None,
        for_seconds: input.for_seconds,
        webhook_id,
    })
}

#[utoipa::path(
    get, path = "/api/v1/alerts", tag = "alerts", summary = "The project's alert rules with their state",
    params(crate::http::listing::Paging),
    responses((status = 200, description = "Rules, oldest first, without their history.", body = Listed<AlertJson>), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn list(
    State(app): State<Arc<AppState>>,
    session: Session,
    RawQuery(raw): RawQuery,
) -> Result<Json<Listed<AlertJson>>, ApiError> {
    let page = Page::from_query(raw.as_deref())?;
    // Oldest first; the key is (creation time, id), fixed-width so text order is that order.
    let items = project_alerts(&app, session.project_id, false)
        .await?
        .iter()
        .map(|e| (format!("{:020}:{}", e.rule.created_at_ms.max(0), e.rule.id), alert_json(e, false)))
        .collect();
    Ok(Json(page.apply(items)))
}

#[utoipa::path(
    post, path = "/api/v1/alerts", tag = "alerts", summary = "Create an alert rule",
    request_body(content = AlertRuleInput, example = json!({"name": "checkout errors", "metric": "error_rate", "filter": {"service": "checkout"}, "comparison": ">", "threshold": 0.05, "window_minutes": 5, "for_seconds": 60})),
    responses(
        (status = 201, description = "Created; `ok` until its first evaluation.", body = AlertJson),
        (status = 400, description = "Invalid fields, or `unknown_webhook`: `webhook_id` names no webhook of the project.", body = crate::http::error::ErrorBody),
        (status = 409, description = "The project has the maximum number of rules.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn create(
    State(app): State<Arc<AppState>>,
    session: Session,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let input: AlertRuleInput = crate::http::body::json(&headers, body, MAX_ALERT_BODY)?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let rule = validate(input, session.project_id, id, app.clock.now_millis())?;
    check_target(&app, session.project_id, rule.webhook_id.as_deref()).await?;
    let command = MetaCommand::CreateAlertRule { org_id: session.user.org_id, rule: rule.clone() };
    expect_done(app.cluster.meta_change(&command).await?, "a new alert rule")?;
    let entry = AlertEntry { rule, status: Default::default() };
    Ok((StatusCode::CREATED, Json(alert_json(&entry, true))).into_response())
}

#[utoipa::path(
    get, path = "/api/v1/alerts/{id}", tag = "alerts", summary = "An alert rule with its state and transitions",
    params(("id" = String, Path, description = "The rule's id.")),
    responses((status = 200, description = "The rule, with `history`: its newest transitions, oldest first.", body = AlertJson), crate::http::openapi::ReadErrors),
    security(("jwt" = []))
)]
pub async fn get(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
) -> Result<Json<AlertJson>, ApiError> {
    let not_found = || ApiError::NotFound(format!("no alert rule {id} in this project"));
    if id.is_empty() || id.len() > MAX_ID_CHARS {
        return Err(not_found());
    }
    let all = project_alerts(&app, session.project_id, true).await?;
    let entry = all.iter().find(|e| e.rule.id == id).ok_or_else(not_found)?;
    Ok(Json(alert_json(entry, true)))
}

#[utoipa::path(
    delete, path = "/api/v1/alerts/{id}", tag = "alerts", summary = "Delete an alert rule",
    params(("id" = String, Path, description = "The rule's id.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 409, description = "Managed by an AlertRule resource.", body = crate::http::error::ErrorBody),
        crate::http::openapi::AccountErrors
    ),
    security(("jwt" = []))
)]
pub async fn delete(
    State(app): State<Arc<AppState>>,
    session: Session,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if id.is_empty() || id.len() > MAX_ID_CHARS {
        return Err(ApiError::NotFound(format!("no alert rule {id} in this project")));
    }
    let command = MetaCommand::DeleteAlertRule { org_id: session.user.org_id, project_id: session.project_id, id };
    expect_done(app.cluster.meta_change(&command).await?, "deleting an alert rule")?;
    Ok(StatusCode::NO_CONTENT)
}

/// 400 `unknown_webhook` unless `webhook_id` names a webhook of `project_id`.
pub async fn check_target(app: &AppState, project_id: ProjectId, webhook_id: Option<&str>) -> Result<(), ApiError> {
    let Some(id) = webhook_id else { return Ok(()) };
    let hooks: Vec<WebhookInfo> = app.cluster.meta_read(&MetaQuery::Webhooks { project_id }).await?;
    if hooks.iter().any(|h| h.id == id) {
        return Ok(());
    }
    Err(ApiError::BadRequest("unknown_webhook", format!("webhook_id {id} names no webhook of this project")))
}

/// The admin API's answer for a managed rule: its id and state, which the operator shows in
/// the AlertRule's status.
pub async fn managed_rule_status(app: &AppState, id: String) -> Result<AlertRuleResponse, ApiError> {
    // Only the rule's project is read, when the cache already knows the rule.
    let project_id =
        app.cluster.meta_cache().and_then(|c| c.alert_rules.iter().find(|r| r.id == id).map(|r| r.project_id));
    let entries: Vec<AlertEntry> = app.cluster.meta_read(&MetaQuery::Alerts { project_id, history: true }).await?;
    let status = entries.into_iter().find(|e| e.rule.id == id).map(|e| e.status).unwrap_or_default();
    Ok(AlertRuleResponse {
        id,
        state: Some(status.state.as_str().to_owned()),
        last_value: status.last_value,
        last_transition_at: status.history.last().map(|t| time_json(t.at_ms)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(json: serde_json::Value) -> Result<AlertRule, ApiError> {
        validate(serde_json::from_value(json).unwrap(), ProjectId::random(), "r".into(), 0)
    }

    fn fields(err: ApiError) -> Vec<String> {
        match err {
            ApiError::Validation { errors, .. } => errors.into_iter().map(|e| e.field).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_bad_field_of_a_rule_is_reported_at_once() {
        let mut bad: AlertRuleInput = serde_json::from_value(serde_json::json!({
            "name": " ", "metric": "log_count", "comparison": ">", "threshold": 1,
            "window_minutes": 0, "for_seconds": 86_401,
            "filter": {"level": "ERROR,LOUD", "service": "x".repeat(1001)}
        }))
        .unwrap();
        bad.threshold = f64::INFINITY;
        let got = fields(validate(bad, ProjectId::random(), "r".into(), 0).unwrap_err());
        for f in ["name", "threshold", "window_minutes", "for_seconds", "filter.level", "filter.service"] {
            assert!(got.iter().any(|g| g == f), "{f} missing from {got:?}");
        }
    }

    #[test]
    fn a_valid_rule_keeps_its_filter_and_defaults_to_enabled() {
        let r = input(serde_json::json!({
            "name": "checkout errors", "metric": "error_rate", "comparison": ">=", "threshold": 0.05,
            "window_minutes": 5, "filter": {"service": "checkout", "operation": " "}
        }))
        .unwrap();
        assert!(r.enabled);
        assert_eq!((r.metric.as_str(), r.comparison.as_str(), r.for_seconds), ("error_rate", ">=", 0));
        assert_eq!((r.filter.service.as_deref(), r.filter.operation), (Some("checkout"), None));
    }

    #[test]
    fn unknown_fields_in_the_rule_or_its_filter_and_unknown_metrics_are_refused() {
        let base = serde_json::json!({"name": "n", "metric": "error_rate", "comparison": ">", "threshold": 1,
            "window_minutes": 5});
        assert!(serde_json::from_value::<AlertRuleInput>(base.clone()).is_ok());
        let mut extra = base.clone();
        extra["surprise"] = 1.into();
        assert!(serde_json::from_value::<AlertRuleInput>(extra).is_err());
        let mut misspelt = base.clone();
        misspelt["filter"] = serde_json::json!({"services": "checkout"});
        assert!(serde_json::from_value::<AlertRuleInput>(misspelt).is_err());
        let mut metric = base;
        metric["metric"] = "vibes".into();
        assert!(serde_json::from_value::<AlertRuleInput>(metric).is_err());
    }
}

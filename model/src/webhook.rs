//! Webhooks (docs/API.md, "Webhooks"): subscriptions of a project to event names, and the
//! durable delivery queue meta keeps for them. Meta applies these records deterministically:
//! every time and every random value (lease tokens, jitter) comes from the proposing router.

use serde::{Deserialize, Serialize};

use crate::ids::{OrgId, ProjectId};

pub const SYSTEM_ALERT_TRIGGERED: &str = "system.alert_triggered";
pub const SYSTEM_ALERT_RESOLVED: &str = "system.alert_resolved";
pub const SYSTEM_QUOTA_EXCEEDED: &str = "system.quota_exceeded";
/// The system events a webhook may subscribe to; other `system.` names are refused.
pub const SYSTEM_EVENTS: [&str; 3] = [SYSTEM_ALERT_TRIGGERED, SYSTEM_ALERT_RESOLVED, SYSTEM_QUOTA_EXCEEDED];
/// The `type` of the body `POST /api/webhooks/{id}/test` sends.
pub const TEST_EVENT: &str = "webhook.test";
/// The `type` of a delivery carrying ingested customer events.
pub const CUSTOMER_EVENTS: &str = "events";

pub const MAX_WEBHOOKS_PER_PROJECT: usize = 20;
pub const MAX_URL_LEN: usize = 2048;
pub const MAX_EVENTS_PER_WEBHOOK: usize = 50;
pub const MAX_EVENT_NAME_LEN: usize = 200;
/// Finished deliveries kept per webhook, newest first; older ones are dropped.
pub const MAX_FINISHED_PER_WEBHOOK: usize = 100;
/// Pending deliveries per webhook; a delivery beyond this is dropped and counted.
pub const MAX_PENDING_PER_WEBHOOK: usize = 500;
/// Largest body one delivery carries; a larger batch of customer events is split.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// Longest response excerpt and error message kept per attempt.
pub const MAX_EXCERPT_BYTES: usize = 512;
/// How long a worker owns a leased delivery: more than the 10 s request timeout.
pub const LEASE_MS: i64 = 60_000;
/// Request timeout of one attempt.
pub const DELIVERY_TIMEOUT_MS: i64 = 10_000;
/// Delays before each retry (A9): after the first attempt 5 s, then 5 min, ... After the last
/// retry fails the delivery is `failed`.
pub const RETRY_DELAYS_MS: [i64; 7] = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];
/// After a rotation the previous secret still signs for this long.
pub const ROTATION_OVERLAP_MS: i64 = 24 * 3600 * 1000;
/// Ids of published events are remembered this long, so a repeat publishes nothing.
pub const PUBLISHED_ID_TTL_MS: i64 = 62 * 24 * 3600 * 1000;
pub const MAX_EVENT_ID_LEN: usize = 256;

/// Something that happened in Sextant itself, for the webhooks subscribed to `name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SystemEvent {
    /// Idempotency key, for example `alert:{rule}:{transition_seq}` or
    /// `quota:{org}:{yyyymm}`: publishing the same id twice enqueues nothing the second time.
    pub id: String,
    /// One of [`SYSTEM_EVENTS`].
    pub name: String,
    pub org_id: OrgId,
    /// `None`: every project of the org.
    #[serde(default)]
    pub project_id: Option<ProjectId>,
    pub occurred_at_ms: i64,
    pub payload: serde_json::Value,
    /// The one webhook to deliver to (an alert rule's target), whatever it subscribes to;
    /// `None`: every webhook subscribed to `name`.
    #[serde(default)]
    pub webhook_id: Option<String>,
}

/// A customer analytics event, as a webhook delivery carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CustomerEvent {
    /// The event name subscriptions match on.
    pub name: String,
    /// The event as the delivery body shows it.
    pub body: serde_json::Value,
}

/// A signing secret, `whsec_` + base64 of the key bytes. Its `Debug` shows none of it, so a
/// command or record in a log line does not leak it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SigningSecret(pub String);

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(<redacted>)")
    }
}

/// A webhook's secret and, after a rotation, until when it still signs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookSecret {
    pub secret: SigningSecret,
    /// Set on the previous secret by a rotation: it signs until then.
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    pub id: String,
    pub org_id: OrgId,
    pub project_id: ProjectId,
    pub url: String,
    pub events: Vec<String>,
    pub enabled: bool,
    pub created_at_ms: i64,
    /// Current first; during a rotation's overlap also the previous one.
    pub secrets: Vec<WebhookSecret>,
    /// Why it was disabled (`gone`: the endpoint answered 410).
    #[serde(default)]
    pub disabled_reason: Option<String>,
    /// Deliveries not enqueued because [`MAX_PENDING_PER_WEBHOOK`] were pending.
    #[serde(default)]
    pub dropped: u64,
}

impl Webhook {
    pub fn subscribes(&self, name: &str) -> bool {
        self.enabled && self.events.iter().any(|e| e == name)
    }

    /// The secrets that sign at `now_ms`, current first.
    pub fn signing_secrets(&self, now_ms: i64) -> Vec<SigningSecret> {
        self.secrets
            .iter()
            .filter(|s| s.expires_at_ms.is_none_or(|end| now_ms < end))
            .map(|s| s.secret.clone())
            .collect()
    }

    /// Everything but the secrets: what lists and routers' views carry.
    pub fn info(&self) -> WebhookInfo {
        WebhookInfo {
            id: self.id.clone(),
            project_id: self.project_id,
            url: self.url.clone(),
            events: self.events.clone(),
            enabled: self.enabled,
            created_at_ms: self.created_at_ms,
            disabled_reason: self.disabled_reason.clone(),
            dropped: self.dropped,
        }
    }
}

/// A webhook without its secrets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookInfo {
    pub id: String,
    pub project_id: ProjectId,
    pub url: String,
    pub events: Vec<String>,
    pub enabled: bool,
    pub created_at_ms: i64,
    #[serde(default)]
    pub disabled_reason: Option<String>,
    /// Deliveries not enqueued because its queue was full.
    #[serde(default)]
    pub dropped: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum DeliveryStatus {
    Pending,
    Succeeded,
    Failed,
}

/// One try of a delivery.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first try.
    pub attempt: u32,
    pub at_ms: i64,
    /// The response status, if a response came.
    pub status_code: Option<u16>,
    /// Why no 2xx came (connection refused, timeout, refused address, status).
    pub error: Option<String>,
    pub duration_ms: u64,
    /// The start of the response body, at most [`MAX_EXCERPT_BYTES`].
    #[serde(default)]
    pub response_excerpt: Option<String>,
}

/// A worker's hold on a delivery: no other worker takes it before `until_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub worker: String,
    pub token: String,
    pub until_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The `webhook-id` header: the same for every attempt.
    pub id: String,
    pub webhook_id: String,
    /// The event name (the body's `type`).
    pub event: String,
    /// The exact body every attempt sends.
    pub body: String,
    pub created_at_ms: i64,
    pub status: DeliveryStatus,
    pub attempts: Vec<Attempt>,
    /// When the next attempt is due, while pending.
    pub next_attempt_at_ms: Option<i64>,
    #[serde(default)]
    pub lease: Option<Lease>,
}

/// What a worker gets for a leased delivery: enough to send it and sign it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeasedDelivery {
    pub delivery_id: String,
    pub webhook_id: String,
    pub url: String,
    pub secrets: Vec<SigningSecret>,
    pub body: String,
    /// The number this attempt will have.
    pub attempt: u32,
}

/// How an attempt ended, as the worker judged it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AttemptOutcome {
    /// A 2xx.
    Succeeded,
    /// Try again at `next_attempt_at_ms`, or fail if that was the last try (`None`).
    Retry { next_attempt_at_ms: Option<i64> },
    /// The endpoint answered 410: the delivery fails and the webhook is disabled.
    Gone,
}

/// The retry delay after `attempts` failed tries, before jitter; `None` when no retry is left.
pub fn retry_delay_ms(attempts: u32) -> Option<i64> {
    let i = usize::try_from(attempts).ok()?.checked_sub(1)?;
    RETRY_DELAYS_MS.get(i).copied()
}

/// The `webhook-id` of the delivery of `event_id` to `webhook_id`: deterministic, so a repeated
/// publish or a replayed log yields the same id.
pub fn delivery_id(event_id: &str, webhook_id: &str) -> String {
    let h = xxhash_rust::xxh3::xxh3_128(format!("{event_id}\u{0}{webhook_id}").as_bytes());
    format!("msg_{h:032x}")
}

/// The delivery body of `POST /api/webhooks/{id}/test`.
pub fn test_event_body(webhook_id: &str, at_ms: i64) -> String {
    serde_json::json!({
        "type": TEST_EVENT,
        "timestamp": crate::time::format_nanos(at_ms.saturating_mul(1_000_000)),
        "data": {"webhook_id": webhook_id},
    })
    .to_string()
}

/// The delivery body of a system event: `{type, timestamp, data}`, as Standard Webhooks
/// recommends.
pub fn system_event_body(event: &SystemEvent) -> String {
    serde_json::json!({
        "type": event.name,
        "timestamp": crate::time::format_nanos(event.occurred_at_ms.saturating_mul(1_000_000)),
        "data": event.payload,
    })
    .to_string()
}

/// Checks the fields of a new webhook; `Err` names the field and the reason.
pub fn validate_events(events: &[String]) -> Result<(), (&'static str, String)> {
    if events.is_empty() {
        return Err(("events", "must name at least one event".into()));
    }
    if events.len() > MAX_EVENTS_PER_WEBHOOK {
        return Err(("events", format!("at most {MAX_EVENTS_PER_WEBHOOK} events")));
    }
    for e in events {
        if e.is_empty() || e.len() > MAX_EVENT_NAME_LEN {
            return Err(("events", format!("event names are 1 to {MAX_EVENT_NAME_LEN} bytes")));
        }
        if e.chars().any(char::is_control) {
            return Err(("events", "event names have no control characters".into()));
        }
        if e.starts_with("system.") && !SYSTEM_EVENTS.contains(&e.as_str()) {
            return Err(("events", format!("unknown system event {e:?}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_schedule_is_the_contracts_then_ends() {
        let delays: Vec<i64> = (1..=8).filter_map(retry_delay_ms).collect();
        assert_eq!(delays, RETRY_DELAYS_MS);
        assert_eq!(retry_delay_ms(0), None);
        assert_eq!(retry_delay_ms(8), None);
    }

    #[test]
    fn previous_secrets_stop_signing_when_the_overlap_ends() {
        let hook = Webhook {
            id: "w".into(),
            org_id: OrgId::random(),
            project_id: ProjectId::random(),
            url: "https://x.test".into(),
            events: vec!["a".into()],
            enabled: true,
            created_at_ms: 0,
            secrets: vec![
                WebhookSecret { secret: SigningSecret("new".into()), expires_at_ms: None },
                WebhookSecret { secret: SigningSecret("old".into()), expires_at_ms: Some(100) },
            ],
            disabled_reason: None,
            dropped: 0,
        };
        let text = |v: Vec<SigningSecret>| v.into_iter().map(|s| s.0).collect::<Vec<_>>();
        assert_eq!(text(hook.signing_secrets(99)), ["new", "old"]);
        assert_eq!(text(hook.signing_secrets(100)), ["new"]);
        assert!(!format!("{hook:?}").contains("new"), "Debug shows no secret");
    }

    #[test]
    fn event_lists_are_bounded_and_system_names_known() {
        assert!(validate_events(&["signup".into(), SYSTEM_QUOTA_EXCEEDED.into()]).is_ok());
        assert!(validate_events(&[]).is_err());
        assert!(validate_events(&["system.nope".into()]).is_err());
        assert!(validate_events(&["x".repeat(MAX_EVENT_NAME_LEN + 1)]).is_err());
        assert!(validate_events(&vec!["e".into(); MAX_EVENTS_PER_WEBHOOK + 1]).is_err());
    }
}

//! The delivery worker every router runs: when meta has due deliveries it leases a few (a
//! lease in meta, so no other worker sends them meanwhile), sends each signed, and records the
//! attempt with the outcome and, for a failure, when to try again (A9's schedule with jitter,
//! or later if the receiver's `Retry-After` says so). A worker that dies holding a lease loses
//! nothing: the lease lapses and another worker sends the delivery.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use rand::Rng;
use sextant_model::meta::{MetaCommand, MetaCommandResult, MetaQuery};
use sextant_model::webhook::{
    retry_delay_ms, Attempt, AttemptOutcome, LeasedDelivery, SigningSecret, LEASE_MS, MAX_EXCERPT_BYTES,
    RETRY_DELAYS_MS,
};

use super::sign;
use crate::cluster::ClusterError;
use crate::AppState;

/// How often an idle worker asks meta whether anything is due (a read, not a log entry).
const POLL: Duration = Duration::from_millis(500);
/// Deliveries leased at once by one worker.
const LEASE_BATCH: u32 = 16;
/// Retry delays vary by up to this fraction either way, so that receivers that failed
/// together are not retried together.
const JITTER: f64 = 0.1;
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER_MS: i64 = RETRY_DELAYS_MS[RETRY_DELAYS_MS.len() - 1];
/// Tries of recording an attempt before giving up on it (its lease then lapses and the
/// delivery is sent again: at least once).
const RECORD_TRIES: u32 = 5;

pub fn spawn(app: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match run_once(&app).await {
                // More may be due: ask again at once.
                Ok(n) if n > 0 => continue,
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "webhook worker could not reach meta"),
            }
            tokio::time::sleep(POLL).await;
        }
    })
}

/// Leases what is due now, sends it and records every attempt. Answers how many were sent.
pub async fn run_once(app: &AppState) -> Result<usize, ClusterError> {
    let now_ms = app.clock.now_millis();
    let due: u64 = app.cluster.meta_read(&MetaQuery::DueDeliveries { now_ms }).await?;
    if due == 0 {
        return Ok(0);
    }
    let token = uuid::Uuid::new_v4().simple().to_string();
    let lease = MetaCommand::LeaseDeliveries {
        worker: app.router_id.clone(),
        token: token.clone(),
        now_ms,
        lease_ms: LEASE_MS,
        max: LEASE_BATCH,
    };
    let deliveries = match app.cluster.meta_write::<MetaCommandResult>(&lease).await? {
        MetaCommandResult::Leased { deliveries } => deliveries,
        other => return Err(ClusterError::Internal(format!("unexpected answer to a lease: {other:?}"))),
    };
    let n = deliveries.len();
    let sends = deliveries.into_iter().map(|d| {
        let token = token.clone();
        async move {
            let (attempt, outcome) = send(app, &d).await;
            record(app, &d, &token, attempt, outcome).await;
        }
    });
    futures::future::join_all(sends).await;
    Ok(n)
}

async fn record(app: &AppState, d: &LeasedDelivery, token: &str, attempt: Attempt, outcome: AttemptOutcome) {
    let command = MetaCommand::RecordDeliveryAttempt {
        delivery_id: d.delivery_id.clone(),
        token: token.to_owned(),
        attempt,
        outcome,
    };
    for i in 0..RECORD_TRIES {
        match app.cluster.meta_write::<MetaCommandResult>(&command).await {
            Ok(_) => return,
            Err(e) if i + 1 == RECORD_TRIES => {
                tracing::warn!(delivery = %d.delivery_id, error = %e, "could not record a webhook attempt");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200 << i)).await,
        }
    }
}

/// What a receiver answered, or why nothing was answered.
pub struct Response {
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub excerpt: Option<String>,
    pub retry_after_ms: Option<i64>,
    pub duration_ms: u64,
}

/// Sends `body` to `url` as message `id`, signed with `secrets`, through the guarded client.
pub async fn post(app: &AppState, url: &str, id: &str, secrets: &[SigningSecret], body: &str) -> Response {
    let started = app.clock.monotonic();
    let elapsed =
        |app: &AppState| u64::try_from(app.clock.monotonic().saturating_sub(started).as_millis()).unwrap_or(u64::MAX);
    let url = match app.webhooks.policy.check_url(url) {
        Ok(u) => u,
        Err(refused) => {
            return Response {
                status_code: None,
                error: Some(refused.to_string()),
                excerpt: None,
                retry_after_ms: None,
                duration_ms: 0,
            }
        }
    };
    let timestamp = app.clock.now_secs();
    let request = app
        .webhooks
        .client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", sign::header(secrets, id, timestamp, body.as_bytes()))
        .body(body.to_owned());
    match request.send().await {
        Ok(mut resp) => {
            let status = resp.status();
            let retry_after_ms = retry_after_ms(resp.headers(), app.clock.now_millis());
            let excerpt = excerpt(&mut resp).await;
            let error = if status.is_success() {
                None
            } else if status.is_redirection() {
                Some(format!("HTTP {}: redirects are not followed", status.as_u16()))
            } else {
                Some(format!("HTTP {}", status.as_u16()))
            };
            Response { status_code: Some(status.as_u16()), error, excerpt, retry_after_ms, duration_ms: elapsed(app) }
        }
        Err(e) => Response {
            status_code: None,
            error: Some(truncate(error_chain(&e.without_url()))),
            excerpt: None,
            retry_after_ms: None,
            duration_ms: elapsed(app),
        },
    }
}

/// One attempt of a leased delivery, and what should follow it.
async fn send(app: &AppState, d: &LeasedDelivery) -> (Attempt, AttemptOutcome) {
    let at_ms = app.clock.now_millis();
    let r = post(app, &d.url, &d.delivery_id, &d.secrets, &d.body).await;
    let now_ms = app.clock.now_millis();
    let outcome = match r.status_code {
        Some(code) if StatusCode::from_u16(code).is_ok_and(|s| s.is_success()) => AttemptOutcome::Succeeded,
        Some(410) => AttemptOutcome::Gone,
        _ => AttemptOutcome::Retry {
            next_attempt_at_ms: next_attempt_at(d.attempt, now_ms, r.retry_after_ms, rand::thread_rng().gen()),
        },
    };
    let attempt = Attempt {
        attempt: d.attempt,
        at_ms,
        status_code: r.status_code,
        error: r.error,
        duration_ms: r.duration_ms,
        response_excerpt: r.excerpt,
    };
    (attempt, outcome)
}

/// When to try again after failed attempt number `attempt` at `now_ms`: the schedule's delay
/// moved by up to [`JITTER`] (`unit` in [0, 1) picks where), or the receiver's `Retry-After`
/// if that is later. `None` when no retry is left.
pub fn next_attempt_at(attempt: u32, now_ms: i64, retry_after_ms: Option<i64>, unit: f64) -> Option<i64> {
    let delay = retry_delay_ms(attempt)?;
    let factor = 1.0 - JITTER + 2.0 * JITTER * unit.clamp(0.0, 1.0);
    let jittered = (delay as f64 * factor) as i64;
    let wait = retry_after_ms.map_or(jittered, |r| jittered.max(r.min(MAX_RETRY_AFTER_MS)));
    Some(now_ms.saturating_add(wait))
}

/// `Retry-After` as milliseconds from `now_ms`: delay-seconds or an HTTP date.
fn retry_after_ms(headers: &HeaderMap, now_ms: i64) -> Option<i64> {
    let v = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u32>() {
        return Some(i64::from(secs) * 1000);
    }
    let at = jiff::fmt::rfc2822::parse(v).ok()?.timestamp().as_millisecond();
    Some(at.saturating_sub(now_ms).max(0))
}

/// The start of the response body, at most [`MAX_EXCERPT_BYTES`]; the rest is not read.
async fn excerpt(resp: &mut reqwest::Response) -> Option<String> {
    let mut bytes = Vec::new();
    while bytes.len() < MAX_EXCERPT_BYTES {
        match resp.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk[..chunk.len().min(MAX_EXCERPT_BYTES - bytes.len())]),
            _ => break,
        }
    }
    (!bytes.is_empty()).then(|| truncate(String::from_utf8_lossy(&bytes).into_owned()))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// At most [`MAX_EXCERPT_BYTES`], cut at a character boundary.
fn truncate(mut s: String) -> String {
    if s.len() > MAX_EXCERPT_BYTES {
        let mut end = MAX_EXCERPT_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_follow_the_schedule_within_the_jitter() {
        for (i, delay) in RETRY_DELAYS_MS.iter().enumerate() {
            let attempt = i as u32 + 1;
            let low = next_attempt_at(attempt, 1_000, None, 0.0).unwrap() - 1_000;
            let high = next_attempt_at(attempt, 1_000, None, 0.999_999).unwrap() - 1_000;
            assert_eq!(low, (*delay as f64 * 0.9) as i64);
            assert!(high <= (*delay as f64 * 1.1) as i64 && high > *delay, "{high} for {delay}");
        }
        assert_eq!(next_attempt_at(8, 1_000, None, 0.5), None, "the eighth failure is the last");
    }

    #[test]
    fn a_later_retry_after_is_honoured_and_an_earlier_one_does_not_hurry() {
        assert_eq!(next_attempt_at(1, 0, Some(60_000), 0.5), Some(60_000));
        assert_eq!(next_attempt_at(2, 0, Some(1_000), 0.5), Some(300_000));
        assert_eq!(next_attempt_at(1, 0, Some(i64::MAX), 0.5), Some(MAX_RETRY_AFTER_MS), "bounded");
        let mut h = HeaderMap::new();
        h.insert("retry-after", "120".parse().unwrap());
        assert_eq!(retry_after_ms(&h, 0), Some(120_000));
        h.insert("retry-after", "Thu, 26 Nov 2026 14:00:30 GMT".parse().unwrap());
        let now = jiff::Timestamp::from_second(1_795_701_600).unwrap().as_millisecond(); // 14:00:00
        assert_eq!(retry_after_ms(&h, now), Some(30_000));
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after_ms(&h, 0), None);
    }

    #[test]
    fn excerpts_are_cut_at_a_character_boundary() {
        let s = "é".repeat(MAX_EXCERPT_BYTES);
        let t = truncate(s);
        assert!(t.len() <= MAX_EXCERPT_BYTES && t.len() >= MAX_EXCERPT_BYTES - 1);
    }
}

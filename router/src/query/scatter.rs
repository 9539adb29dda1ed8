//! Scatter-gather (the `Reads` section of docs/ARCHITECTURE.md): a plan is sent to every data
//! shard's leader at once, each under a per-shard timeout, and what they answer is gathered
//! for the endpoint to fold (`sextant_model::query::Merge`). Partial answers follow docs/API.md, "Reads: time
//! range, partial answers and limits".

use std::future::Future;
use std::time::Duration;

use axum::Json;
use serde::Serialize;
use sextant_model::query::{Partial, PartialKind, Plan, ShardQuery, ShardReply};
use sextant_model::ProjectId;

use crate::cluster::{ClusterError, GroupId};
use crate::http::error::ApiError;
use crate::AppState;

/// Rows one shard may read for one query (bounds its memory and time).
pub const MAX_ROWS_PER_SHARD: u64 = 5_000_000;
/// How long a shard (leader search included) may take before it counts as missing.
pub const SHARD_TIMEOUT: Duration = crate::cluster::QUERY_DEADLINE;

/// One query over every shard: its answers, and the shards that did not answer.
pub struct Gathered {
    pub partials: Vec<(GroupId, Partial)>,
    pub missing: Vec<GroupId>,
}

impl Gathered {
    /// Every shard's partial of kind `P` merged in turn (partials of another kind are not):
    /// the merged answer. The partials are consumed; which shards are missing stays, for
    /// [`Self::answer`].
    pub fn fold<P: PartialKind>(&mut self) -> P {
        sextant_model::query::merge_all(std::mem::take(&mut self.partials).into_iter().filter_map(|(_, p)| P::pick(p)))
    }

    /// Which shards the answer lacks.
    pub fn coverage(&self) -> Coverage {
        Coverage { partial: !self.missing.is_empty(), missing_shards: self.missing.clone() }
    }

    /// `body` as the answer, marked partial if shards are missing.
    pub fn answer<T>(&self, body: T) -> Json<Answer<T>> {
        Json(Answer { body, coverage: self.coverage() })
    }
}

/// `"partial": true` and `missing_shards` in a partial answer; nothing in a complete one.
#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
pub struct Coverage {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_shards: Vec<GroupId>,
}

/// A read's answer: its body, and which shards it lacks.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Answer<T> {
    #[serde(flatten)]
    pub body: T,
    #[serde(flatten)]
    pub coverage: Coverage,
}

/// Calls `call` for every group concurrently, each under `timeout`. An unavailable or
/// late shard is missing: an error unless `allow_partial`. A shard over its row budget
/// fails the whole query (a partial answer would be silently wrong).
pub async fn gather<F, Fut>(
    groups: Vec<GroupId>,
    timeout: Duration,
    allow_partial: bool,
    call: F,
) -> Result<Gathered, ApiError>
where
    F: Fn(GroupId) -> Fut,
    Fut: Future<Output = Result<ShardReply, ClusterError>>,
{
    let replies = futures::future::join_all(groups.iter().map(|&g| {
        let fut = call(g);
        async move { (g, tokio::time::timeout(timeout, fut).await) }
    }))
    .await;
    let mut out = Gathered { partials: Vec::new(), missing: Vec::new() };
    for (group, reply) in replies {
        match reply {
            Ok(Ok(ShardReply { partial: Some(p), .. })) => out.partials.push((group, p)),
            Ok(Ok(ShardReply { partial: None, .. })) => {
                return Err(ApiError::QueryTooLarge { max_rows_per_shard: MAX_ROWS_PER_SHARD });
            }
            Ok(Err(ClusterError::Internal(m))) => return Err(ApiError::Internal(m)),
            Ok(Err(ClusterError::Unavailable(m))) => {
                tracing::warn!(group, error = %m, "shard missing from a query");
                out.missing.push(group);
            }
            Err(_) => {
                tracing::warn!(group, "shard timed out in a query");
                out.missing.push(group);
            }
        }
    }
    if !out.missing.is_empty() && !allow_partial {
        return Err(ApiError::ShardsUnavailable { missing: out.missing });
    }
    Ok(out)
}

/// Runs `plan` on every data shard for `project` over `[from, to)`.
pub async fn scatter(
    app: &AppState,
    project: &ProjectId,
    (from, to): (i64, i64),
    allow_partial: bool,
    plan: impl Into<Plan>,
) -> Result<Gathered, ApiError> {
    let shards = app.cluster.shard_count();
    if shards == 0 {
        return Err(ApiError::Unavailable("the storage topology is not known yet".into()));
    }
    let base = ShardQuery {
        group: 0,
        project_id: project.to_string(),
        from_unix_nanos: from,
        to_unix_nanos: to,
        max_rows: MAX_ROWS_PER_SHARD,
        plan: plan.into(),
    };
    let started = std::time::Instant::now();
    let out = gather((1..=shards as u64).collect(), SHARD_TIMEOUT, allow_partial, |group| {
        app.cluster.query(ShardQuery { group, ..base.clone() })
    })
    .await;
    tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, "query gathered");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::query::Endpoints;

    fn ok() -> ShardReply {
        ShardReply { rows_scanned: 0, partial: Some(Partial::Apm(Endpoints::default())) }
    }

    #[tokio::test]
    async fn a_failed_or_late_shard_is_an_error_unless_partial_answers_are_allowed() {
        let call = |g: GroupId| async move {
            match g {
                2 => Err(ClusterError::Unavailable("no leader".into())),
                // Never answers: the per-shard timeout ends it.
                3 => std::future::pending::<Result<ShardReply, ClusterError>>().await,
                _ => Ok(ok()),
            }
        };
        let t = Duration::from_millis(200);
        match gather(vec![1, 2, 3, 4], t, false, call).await {
            Err(ApiError::ShardsUnavailable { missing }) => assert_eq!(missing, [2, 3]),
            other => panic!("{:?}", other.err()),
        }
        let got = gather(vec![1, 2, 3, 4], t, true, call).await.unwrap();
        assert_eq!(got.missing, [2, 3]);
        assert_eq!(got.partials.iter().map(|(g, _)| *g).collect::<Vec<_>>(), [1, 4]);
        let body = serde_json::to_value(got.answer(serde_json::json!({})).0).unwrap();
        assert_eq!(body, serde_json::json!({"partial": true, "missing_shards": [2, 3]}));
    }

    #[tokio::test]
    async fn a_shard_over_its_row_budget_fails_the_query() {
        let call =
            |g: GroupId| async move { Ok(if g == 2 { ShardReply { rows_scanned: 7, partial: None } } else { ok() }) };
        let err = gather(vec![1, 2], Duration::from_secs(5), true, call).await.err().unwrap();
        assert!(matches!(err, ApiError::QueryTooLarge { .. }));
    }
}

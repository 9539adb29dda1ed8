//! Scatter-gather (the `Reads` section of docs/ARCHITECTURE.md): a plan is sent to every data
//! shard's leader at once, each under a per-shard timeout, and what they answer is gathered
//! for the endpoint to fold (`sextant_model::query::Merge`). Partial answers follow docs/API.md, "Reads: time
//! range, partial answers and limits".

use std::future::Future;
use std::time::Duration;

use axum::Json;
use serde::Serialize;
use sextant_model::query::{Cost, Merge, Partial, PartialKind, Plan, Refused, ShardQuery, ShardReply};
use sextant_model::ProjectId;

use crate::cluster::{ClusterError, GroupId};
use crate::http::error::ApiError;
use crate::AppState;

/// How long a shard (leader search included) may take before it counts as missing.
pub const SHARD_TIMEOUT: Duration = crate::cluster::QUERY_DEADLINE;

/// What one read may cost, over all shards: the rows and compressed bytes its scans would
/// open, estimated from segment metadata before any scan. A plan that reads newest first and
/// stops at a full page (log search, trace list) is not refused by its estimate; it stops
/// where one shard has read `rows` instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryBudget {
    pub rows: u64,
    pub bytes: u64,
}

impl Default for QueryBudget {
    /// 500 million rows and 8 GiB: at the rate of the 10M-event funnel in docs/BENCHMARKS.md
    /// (0.4 CPU-s), about 20 CPU-seconds, well within the default 60 s read timeout on two
    /// cores.
    fn default() -> Self {
        Self { rows: 500_000_000, bytes: 8 << 30 }
    }
}

impl QueryBudget {
    /// 422 `query_too_large` when `cost` is over the budget.
    pub fn check(&self, cost: Cost) -> Result<(), ApiError> {
        if !cost.stops_early && (cost.rows > self.rows || cost.bytes > self.bytes) {
            return Err(ApiError::QueryTooLarge { estimate: Some(cost), budget: *self });
        }
        Ok(())
    }
}

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
    #[schema(value_type = Vec<u64>)]
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

/// Calls `call` for every group concurrently, each under `timeout`: the groups' answers, and
/// the groups that were unavailable or late. Any other error fails the whole call.
async fn each_group<T, F, Fut>(
    groups: Vec<GroupId>,
    timeout: Duration,
    call: F,
) -> Result<(Vec<(GroupId, T)>, Vec<GroupId>), ApiError>
where
    F: Fn(GroupId) -> Fut,
    Fut: Future<Output = Result<T, ClusterError>>,
{
    let replies = futures::future::join_all(groups.iter().map(|&g| {
        let fut = call(g);
        async move { (g, tokio::time::timeout(timeout, fut).await) }
    }))
    .await;
    let (mut answers, mut missing) = (Vec::new(), Vec::new());
    for (group, reply) in replies {
        match reply {
            Ok(Ok(answer)) => answers.push((group, answer)),
            Ok(Err(ClusterError::Internal(m))) => return Err(ApiError::Internal(m)),
            // Reads are not refused for disk space; counted as missing should a node say so.
            Ok(Err(ClusterError::Unavailable(m) | ClusterError::DiskFull(m) | ClusterError::Overloaded(m))) => {
                tracing::warn!(group, error = %m, "shard missing from a query");
                missing.push(group);
            }
            Err(_) => {
                tracing::warn!(group, "shard timed out in a query");
                missing.push(group);
            }
        }
    }
    Ok((answers, missing))
}

/// Every group's estimate of a plan (`call`), summed, checked against `budget` before any
/// group scans: the groups that answered, and those that did not (missing from the query).
pub async fn estimate<F, Fut>(
    groups: Vec<GroupId>,
    timeout: Duration,
    budget: QueryBudget,
    call: F,
) -> Result<(Vec<GroupId>, Vec<GroupId>), ApiError>
where
    F: Fn(GroupId) -> Fut,
    Fut: Future<Output = Result<Cost, ClusterError>>,
{
    let (costs, missing) = each_group(groups, timeout, call).await?;
    let mut total = Cost::default();
    for (_, cost) in &costs {
        total.merge(*cost);
    }
    budget.check(total)?;
    Ok((costs.into_iter().map(|(g, _)| g).collect(), missing))
}

/// Calls `call` for every group concurrently, each under `timeout`; `missing` are groups
/// known missing already. An unavailable or late shard is missing: an error unless
/// `allow_partial`. A shard over its row or memory budget fails the whole query (a partial
/// answer would be silently wrong).
pub async fn gather<F, Fut>(
    groups: Vec<GroupId>,
    missing: Vec<GroupId>,
    timeout: Duration,
    (allow_partial, budget): (bool, QueryBudget),
    call: F,
) -> Result<Gathered, ApiError>
where
    F: Fn(GroupId) -> Fut,
    Fut: Future<Output = Result<ShardReply, ClusterError>>,
{
    let (replies, late) = each_group(groups, timeout, call).await?;
    let mut out = Gathered { partials: Vec::new(), missing };
    out.missing.extend(late);
    out.missing.sort_unstable();
    for (group, reply) in replies {
        match reply.partial {
            Ok(p) => out.partials.push((group, p)),
            Err(Refused::Rows) => return Err(ApiError::QueryTooLarge { estimate: None, budget }),
            Err(Refused::Memory { budget_bytes }) => return Err(ApiError::QueryOutOfMemory { budget_bytes }),
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
    let budget = app.config.server.query_budget;
    let base = ShardQuery {
        group: 0,
        project_id: project.to_string(),
        from_unix_nanos: from,
        to_unix_nanos: to,
        max_rows: budget.rows,
        plan: plan.into(),
    };
    let started = std::time::Instant::now();
    let at = |group| ShardQuery { group, ..base.clone() };
    // Shards that give no estimate are not asked again: they are missing from the answer.
    let (groups, missing) =
        estimate((1..=shards as u64).collect(), SHARD_TIMEOUT, budget, |g| app.cluster.estimate(at(g))).await?;
    let out = gather(groups, missing, SHARD_TIMEOUT, (allow_partial, budget), |g| app.cluster.query(at(g))).await;
    tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, "query gathered");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_model::query::Endpoints;

    fn ok() -> ShardReply {
        ShardReply { rows_scanned: 0, partial: Ok(Partial::Apm(Endpoints::default())) }
    }

    const BUDGET: QueryBudget = QueryBudget { rows: 1000, bytes: 1 << 20 };

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
        match gather(vec![1, 2, 3, 4], vec![], t, (false, BUDGET), call).await {
            Err(ApiError::ShardsUnavailable { missing }) => assert_eq!(missing, [2, 3]),
            other => panic!("{:?}", other.err()),
        }
        let got = gather(vec![1, 2, 3, 4], vec![], t, (true, BUDGET), call).await.unwrap();
        assert_eq!(got.missing, [2, 3]);
        assert_eq!(got.partials.iter().map(|(g, _)| *g).collect::<Vec<_>>(), [1, 4]);
        let body = serde_json::to_value(got.answer(serde_json::json!({})).0).unwrap();
        assert_eq!(body, serde_json::json!({"partial": true, "missing_shards": [2, 3]}));
    }

    #[tokio::test]
    async fn a_shard_over_its_row_or_memory_budget_fails_the_query() {
        let t = Duration::from_secs(5);
        let refusing = |refused: Refused| {
            move |g: GroupId| async move {
                Ok(if g == 2 { ShardReply { rows_scanned: 7, partial: Err(refused) } } else { ok() })
            }
        };
        let err = gather(vec![1, 2], vec![], t, (true, BUDGET), refusing(Refused::Rows)).await.err().unwrap();
        assert!(matches!(err, ApiError::QueryTooLarge { estimate: None, budget: BUDGET }), "{err:?}");
        let memory = Refused::Memory { budget_bytes: 64 };
        let err = gather(vec![1, 2], vec![], t, (true, BUDGET), refusing(memory)).await.err().unwrap();
        assert!(matches!(err, ApiError::QueryOutOfMemory { budget_bytes: 64 }), "{err:?}");
    }

    #[tokio::test]
    async fn estimates_are_summed_over_shards_and_checked_before_any_scan() {
        let t = Duration::from_millis(200);
        // 400 rows per shard: three shards are within 1000, four are not.
        let cost = |stops_early| {
            move |g: GroupId| async move {
                match g {
                    9 => Err(ClusterError::Unavailable("no leader".into())),
                    _ => Ok(Cost { rows: 400, bytes: 10, stops_early }),
                }
            }
        };
        let (asked, missing) = estimate(vec![1, 2, 9], t, BUDGET, cost(false)).await.unwrap();
        assert_eq!((asked, missing), (vec![1, 2], vec![9]));
        let err = estimate(vec![1, 2, 3], t, BUDGET, cost(false)).await.unwrap_err();
        let want = Cost { rows: 1200, bytes: 30, stops_early: false };
        assert!(matches!(err, ApiError::QueryTooLarge { estimate: Some(e), budget: BUDGET } if e == want), "{err:?}");
        let message = err.to_string();
        let resp = axum::response::IntoResponse::into_response(err);
        assert_eq!(resp.status(), 422);
        let body: serde_json::Value =
            serde_json::from_slice(&axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": {"code": "query_too_large", "message": message, "details": {
                "estimated_rows": 1200, "estimated_bytes": 30, "max_rows": 1000, "max_bytes": 1 << 20}}})
        );
        // Bytes count as much as rows.
        let wide = |_| async move { Ok(Cost { rows: 1, bytes: 2 << 20, stops_early: false }) };
        assert!(estimate(vec![1], t, BUDGET, wide).await.is_err());
        // Log search and trace lists stop at a full page: their estimate is not a refusal.
        assert!(estimate(vec![1, 2, 3], t, BUDGET, cost(true)).await.is_ok());
    }
}

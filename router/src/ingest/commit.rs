//! All or nothing: a request's sub-batches are replicated under one batch id, and aborted
//! everywhere if any shard cannot commit its own.

use std::collections::HashMap;
use std::sync::Arc;

use sextant_model::row::RowBatch;
use sextant_proto::convert::persist_row::Packed;

use crate::cluster::{Cluster, GroupId, Write};
use crate::http::error::ApiError;
use crate::ingest::admission::Share;
use crate::AppState;

/// Replicates every sub-batch under one batch id. If any shard cannot commit, the others are
/// told to drop theirs, so a failed request stores nothing. The replication runs as a task of
/// its own: a client that disconnects does not stop it halfway, with some shards holding the
/// batch and no abort sent.
/// Quotas count the request from the start of its replication until the usage roll-up does
/// (`quota::Pending`). The caller holds the request's `Share` of the project's ingest
/// (`admission`), taken before its body was parsed, until this returns.
pub(crate) async fn commit(
    app: &AppState,
    _share: &Share,
    batches: HashMap<GroupId, RowBatch<Packed>>,
) -> Result<(), ApiError> {
    if batches.is_empty() {
        return Ok(());
    }
    let cluster = app.cluster.clone();
    let reservation = app.quota_pending.reserve(&batches);
    let in_flight = app.metrics.commits_in_flight.clone();
    in_flight.inc();
    tokio::spawn(async move {
        let replicated = replicate(cluster, batches).await;
        in_flight.dec();
        let indexes = replicated?;
        reservation.committed(&indexes);
        Ok(())
    })
    .await
    .map_err(|e| ApiError::Internal(format!("batch replication failed: {e}")))?
}

/// The log index each group committed its sub-batch at.
async fn replicate(
    cluster: Arc<Cluster>,
    batches: HashMap<GroupId, RowBatch<Packed>>,
) -> Result<Vec<(GroupId, u64)>, ApiError> {
    let batch_id: u128 = rand::random();
    let groups: Vec<GroupId> = batches.keys().copied().collect();
    let writes = batches.into_iter().map(|(group, batch)| cluster.write(group, batch_id, Write::Batch(batch)));
    let results = futures::future::join_all(writes).await;
    let written: Result<Vec<_>, _> =
        results.into_iter().zip(&groups).map(|(r, g)| r.map(|w| (*g, w.log_index))).collect();
    let err = match written {
        Ok(indexes) => return Ok(indexes),
        Err(e) => e,
    };
    let aborts = groups.iter().map(|g| cluster.write(*g, batch_id, Write::Abort));
    for (group, r) in groups.iter().zip(futures::future::join_all(aborts).await) {
        if let Err(e) = r {
            tracing::error!(group, error = %e, "could not abort a partially committed batch");
        }
    }
    Err(err.into())
}

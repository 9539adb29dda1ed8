//! All or nothing: a request's sub-batches are replicated under one batch id, and aborted
//! everywhere if any shard cannot commit its own.

use std::collections::HashMap;
use std::sync::Arc;

use sextant_model::row::RowBatch;

use crate::cluster::{Cluster, GroupId, Write};
use crate::http::error::ApiError;
use crate::AppState;

/// Replicates every sub-batch under one batch id. If any shard cannot commit, the others are
/// told to drop theirs, so a failed request stores nothing. The replication runs as a task of
/// its own: a client that disconnects does not stop it halfway, with some shards holding the
/// batch and no abort sent.
pub(crate) async fn commit(app: &AppState, batches: HashMap<GroupId, RowBatch>) -> Result<(), ApiError> {
    let cluster = app.cluster.clone();
    tokio::spawn(replicate(cluster, batches))
        .await
        .map_err(|e| ApiError::Internal(format!("batch replication failed: {e}")))?
}

async fn replicate(cluster: Arc<Cluster>, batches: HashMap<GroupId, RowBatch>) -> Result<(), ApiError> {
    let batch_id: u128 = rand::random();
    let groups: Vec<GroupId> = batches.keys().copied().collect();
    let writes = batches.into_iter().map(|(group, batch)| cluster.write(group, batch_id, Write::Batch(batch)));
    let results = futures::future::join_all(writes).await;
    let Some(err) = results.into_iter().find_map(Result::err) else {
        return Ok(());
    };
    let aborts = groups.iter().map(|g| cluster.write(*g, batch_id, Write::Abort));
    for (group, r) in groups.iter().zip(futures::future::join_all(aborts).await) {
        if let Err(e) = r {
            tracing::error!(group, error = %e, "could not abort a partially committed batch");
        }
    }
    Err(err.into())
}

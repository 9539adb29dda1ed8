//! Rows to shards: each row's partition key, through the partition table kept in meta, names
//! the shard group that stores it; a request's rows become one sub-batch per group.

use std::collections::HashMap;

use sextant_model::partition::group_of;
use sextant_model::row::RowBatch;
use sextant_model::ProjectId;
use sextant_proto::convert::persist_row::Packed;

use crate::cluster::GroupId;
use crate::http::error::ApiError;
use crate::AppState;

/// Rows of one kind: their partition key, and how they join a shard's sub-batch.
pub(crate) trait Partitioned {
    type Row;
    /// The partition key; `None` spreads the row randomly.
    fn key(row: &Self::Row) -> Option<&[u8]>;
    /// The sub-batch's rows of this kind.
    fn rows(batch: &mut RowBatch<Packed>) -> &mut Vec<Self::Row>;
}

/// Splits rows into one sub-batch per shard through the partition table.
pub(crate) fn partition<K: Partitioned>(
    app: &AppState,
    project: &ProjectId,
    rows: Vec<K::Row>,
    body_bytes: usize,
) -> Result<HashMap<GroupId, RowBatch<Packed>>, ApiError> {
    let cache = app.meta()?;
    let table = &cache.partition_groups;
    if table.is_empty() {
        return Err(ApiError::Unavailable("the cluster is not bootstrapped yet".into()));
    }
    let total = rows.len().max(1);
    let groups: Vec<GroupId> = rows
        .iter()
        .map(|row| {
            match K::key(row) {
                Some(key) => group_of(table, project, key),
                // No key: any partition's group.
                None => table.get(rand::random::<u32>() as usize % table.len()).copied(),
            }
            .ok_or_else(|| ApiError::Unavailable("the partition table is incomplete".into()))
        })
        .collect::<Result<_, _>>()?;
    // Each sub-batch sized once: rows pushed one by one grew each list by copying it.
    let mut counts: HashMap<GroupId, usize> = HashMap::new();
    groups.iter().for_each(|g| *counts.entry(*g).or_default() += 1);
    let mut batches: HashMap<GroupId, RowBatch<Packed>> = counts
        .into_iter()
        .map(|(group, n)| {
            let mut batch = RowBatch { project_id: project.to_string(), ..Default::default() };
            K::rows(&mut batch).reserve_exact(n);
            (group, batch)
        })
        .collect();
    for (row, group) in rows.into_iter().zip(groups) {
        K::rows(batches.get_mut(&group).expect("counted above")).push(row);
    }
    // Apportioned by rows, the remainder to one sub-batch, so the sub-batches' bytes add up
    // to the body's exactly (a batch is metered on its shard: docs/API.md, "Usage").
    let received = app.clock.now_millis();
    let mut left = body_bytes as u64;
    for batch in batches.values_mut() {
        batch.json_bytes = (body_bytes as u128 * batch.rows() as u128 / total as u128) as u64;
        batch.received_unix_millis = received;
        left -= batch.json_bytes;
    }
    if let Some(batch) = batches.values_mut().next() {
        batch.json_bytes += left;
    }
    Ok(batches)
}

//! Calls from a node's background tasks to the meta group's leader, over the `Storage` gRPC
//! service: reached through any node this one knows, following the leader hints of followers.
//! The request and reply messages stay here; callers pass and get domain types.

use std::time::Duration;

use sextant_model::meta::{MetaCommand, MetaCommandResult, MetaQuery};
use sextant_proto::{MetaRequest, LEADER_HEADER};
use tonic::Code;

use crate::host::NodeHost;

const META_CALL: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum MetaCallError {
    #[error("meta unreachable: {0}")]
    Unavailable(String),
    #[error("meta refused the call: {0}")]
    Refused(String),
    #[error("decoding meta's answer: {0}")]
    Decode(#[from] serde_json::Error),
}

/// A linearizable read of meta's state (the leader answers it).
pub async fn read<R: serde::de::DeserializeOwned>(host: &NodeHost, query: &MetaQuery) -> Result<R, MetaCallError> {
    let json = call(host, serde_json::to_vec(query)?, false).await?;
    Ok(serde_json::from_slice(&json)?)
}

/// Proposes `command` to meta and returns its result once committed.
pub async fn command(host: &NodeHost, command: &MetaCommand) -> Result<MetaCommandResult, MetaCallError> {
    let json = call(host, serde_json::to_vec(command)?, true).await?;
    Ok(serde_json::from_slice(&json)?)
}

async fn call(host: &NodeHost, json: Vec<u8>, write: bool) -> Result<Vec<u8>, MetaCallError> {
    let mut candidates: Vec<String> = Vec::new();
    if let Some(leader) = host.meta().and_then(|m| m.raft.metrics().borrow().current_leader) {
        candidates.extend(host.addresses.read().unwrap().get(&leader).cloned());
    }
    candidates.extend(host.addresses.read().unwrap().values().cloned());
    let mut last = String::from("no node known");
    let mut i = 0;
    let mut hops = 0;
    while i < candidates.len() {
        let addr = candidates[i].clone();
        i += 1;
        let Ok(mut client) = host.channels.storage(&addr) else { continue };
        let req = MetaRequest { json: json.clone() };
        let call = async {
            if write {
                client.meta_write(req).await
            } else {
                client.meta_read(req).await
            }
        };
        match tokio::time::timeout(META_CALL, call).await {
            Ok(Ok(reply)) => return Ok(reply.into_inner().json),
            Ok(Err(status)) => {
                if status.code() == Code::InvalidArgument {
                    return Err(MetaCallError::Refused(status.message().to_owned()));
                }
                let hint = status.metadata().get(LEADER_HEADER).and_then(|v| v.to_str().ok());
                if let Some((_, leader)) = hint.and_then(|h| h.split_once('@')) {
                    if !leader.is_empty() && hops < 8 {
                        hops += 1;
                        candidates.insert(i, leader.to_owned());
                    }
                }
                if status.code() == Code::Unavailable {
                    host.channels.forget(&addr);
                }
                last = format!("{addr}: {}", status.message());
            }
            Err(_) => last = format!("{addr}: timed out"),
        }
    }
    Err(MetaCallError::Unavailable(last))
}

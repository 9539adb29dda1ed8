//! Leader discovery against fake storage nodes: a frozen leader (it accepts connections and
//! answers nothing), a slow one, and two replicas that both claim a group.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sextant_proto::storage_server::{Storage, StorageServer};
use sextant_proto::{
    ClusterInfoReply, ClusterInfoRequest, GetTraceReply, GetTraceRequest, GroupInfo, MetaReply, MetaRequest, QueryCost,
    QueryReply, QueryRequest, WriteReply, WriteRequest,
};
use tonic::{Request, Response};

use super::*;

const SECRET: &str = "router-cluster-test-secret-0123456789";

/// A storage node that reports `leader` as group 1's leader at `term` and answers writes
/// after `write_delay`; `None`: it answers nothing at all, as a frozen process.
#[derive(Clone)]
struct Fake {
    id: NodeId,
    leader: NodeId,
    term: u64,
    write_delay: Option<Duration>,
    writes: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl Storage for Fake {
    async fn write(&self, _: Request<WriteRequest>) -> Result<Response<WriteReply>, Status> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        let Some(delay) = self.write_delay else { return std::future::pending().await };
        tokio::time::sleep(delay).await;
        Ok(Response::new(WriteReply { log_index: 7, duplicate: false }))
    }

    async fn cluster_info(&self, _: Request<ClusterInfoRequest>) -> Result<Response<ClusterInfoReply>, Status> {
        if self.write_delay.is_none() {
            return std::future::pending().await;
        }
        let group = GroupInfo { group: 1, voters: vec![1, 2, 3], leader: self.leader, applied: 0, term: self.term };
        Ok(Response::new(ClusterInfoReply {
            node_id: self.id,
            shard_count: 1,
            groups: vec![group],
            nodes: vec![],
            ..Default::default()
        }))
    }

    async fn get_trace(&self, _: Request<GetTraceRequest>) -> Result<Response<GetTraceReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn query(&self, _: Request<QueryRequest>) -> Result<Response<QueryReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn estimate(&self, _: Request<QueryRequest>) -> Result<Response<QueryCost>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn meta_write(&self, _: Request<MetaRequest>) -> Result<Response<MetaReply>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn meta_read(&self, _: Request<MetaRequest>) -> Result<Response<MetaReply>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

impl Fake {
    fn new(id: NodeId, leader: NodeId, term: u64, write_delay: Option<Duration>) -> Fake {
        Fake { id, leader, term, write_delay, writes: Default::default() }
    }

    /// Serves on a free loopback port; the address.
    async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let service = StorageServer::new(self.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        addr
    }

    fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }
}

/// A router's view: group 1 on nodes 1, 2 and 3 (3 unreachable), led by `leader` at `term`.
async fn cluster_of(nodes: &[&Fake], leader: NodeId, term: u64) -> Arc<Cluster> {
    let mut addrs = HashMap::new();
    for n in nodes {
        addrs.insert(n.id, n.serve().await);
    }
    let cluster = Cluster::new(addrs.values().cloned().collect(), SECRET, None, None).unwrap();
    {
        let mut topo = cluster.topology.write().unwrap();
        topo.nodes = addrs;
        topo.voters.insert(1, vec![1, 2, 3]);
        topo.leaders.insert(1, leader);
        topo.terms.insert(1, term);
        topo.shard_count = 1;
    }
    cluster
}

#[tokio::test]
async fn a_write_waiting_on_a_frozen_leader_moves_to_the_replica_that_took_over() {
    let frozen = Fake::new(1, 1, 2, None);
    let successor = Fake::new(2, 2, 3, Some(Duration::ZERO));
    let cluster = cluster_of(&[&frozen, &successor], 1, 2).await;
    let started = Instant::now();
    let written = cluster.write(1, 42, Write::Abort).await.unwrap();
    assert_eq!(written.log_index, 7);
    assert_eq!((frozen.writes(), successor.writes()), (1, 1));
    // SUSPECT_AFTER, then one probe: far from the 5 s an attempt may last.
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_slow_leader_is_waited_for_while_no_other_replica_leads() {
    let slow = Fake::new(1, 1, 2, Some(Duration::from_millis(1200)));
    let follower = Fake::new(2, 1, 2, Some(Duration::ZERO));
    let cluster = cluster_of(&[&slow, &follower], 1, 2).await;
    cluster.write(1, 42, Write::Abort).await.unwrap();
    assert_eq!((slow.writes(), follower.writes()), (1, 0), "the write went to the leader only, once");
}

#[tokio::test]
async fn of_two_replicas_claiming_a_group_the_newer_term_is_its_leader() {
    // A leader that woke from a pause still claims term 2; the group elected node 2 in term 3.
    let woken = Fake::new(1, 1, 2, Some(Duration::ZERO));
    let elected = Fake::new(2, 2, 3, Some(Duration::ZERO));
    for order in [[&woken, &elected], [&elected, &woken]] {
        let cluster = cluster_of(&order, 0, 0).await;
        cluster.refresh_topology().await.unwrap();
        assert_eq!(cluster.topology.read().unwrap().leaders.get(&1), Some(&2));
        assert_eq!(cluster.topology.read().unwrap().terms.get(&1), Some(&3));
    }
}

/// `sextant dev`'s router hands a write to its node's storage service as a function call,
/// without encoding it; nothing listens at the node's address.
#[tokio::test]
async fn a_write_to_a_node_in_this_process_is_a_function_call() {
    let node = Fake::new(1, 1, 2, Some(Duration::ZERO));
    let over_grpc = Fake::new(1, 1, 2, Some(Duration::ZERO));
    let addr = "127.0.0.1:1".to_string();
    let in_process = InProcessNode {
        addr: addr.clone(),
        services: tonic::service::Routes::new(StorageServer::new(over_grpc.clone())).prepare(),
        storage: Arc::new(node.clone()),
    };
    let cluster = Cluster::new(vec![addr.clone()], SECRET, None, Some(in_process)).unwrap();
    {
        let mut topo = cluster.topology.write().unwrap();
        topo.nodes = HashMap::from([(1, addr)]);
        topo.voters.insert(1, vec![1]);
        topo.leaders.insert(1, 1);
        topo.terms.insert(1, 2);
    }
    let written = cluster.write(1, 42, Write::Abort).await.unwrap();
    assert_eq!(written.log_index, 7);
    assert_eq!((node.writes(), over_grpc.writes()), (1, 0), "the write went to the storage service directly");
    // Every other call still goes through the node's gRPC services, checks and all.
    assert_eq!(cluster.shard_count(), 0);
    cluster.refresh_topology().await.unwrap();
    assert_eq!(cluster.shard_count(), 1, "the topology came through the services");
}

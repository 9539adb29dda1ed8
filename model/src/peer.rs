//! What a component's internal certificate lets it call (docs/API.md, "Internal gRPC"): its
//! role, named by a URI subject alternative name. Nodes may call every internal service;
//! routers only the storage service, never a node's Raft.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerRole {
    Node,
    Router,
}

impl PeerRole {
    pub const ALL: [PeerRole; 2] = [PeerRole::Node, PeerRole::Router];

    /// The URI subject alternative name that carries the role.
    pub fn uri(self) -> &'static str {
        match self {
            PeerRole::Node => "spiffe://sextant/node",
            PeerRole::Router => "spiffe://sextant/router",
        }
    }

    pub fn from_uri(uri: &str) -> Option<PeerRole> {
        Self::ALL.into_iter().find(|r| r.uri() == uri)
    }
}

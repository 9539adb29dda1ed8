//! Records of the meta group (group 0) and the commands and queries that change and read them.
//! The node applies commands deterministically; routers cache a [`MetaView`].

use serde::{Deserialize, Serialize};

use crate::ids::{OrgId, ProjectId, UserId};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Owner,
    Admin,
    Member,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Org {
    pub id: OrgId,
    pub name: String,
    pub plan: String,
    pub default_project: ProjectId,
    pub created_at_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct User {
    pub id: UserId,
    pub org_id: OrgId,
    /// Lower-cased; unique across the cluster.
    pub email: String,
    pub name: String,
    pub role: Role,
    /// Argon2id PHC string.
    pub password_hash: String,
    pub created_at_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Project {
    pub id: ProjectId,
    pub org_id: OrgId,
    pub name: String,
    pub created_at_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    /// `sxk_…`: observability ingest.
    ApiKey,
    /// `sxp_…`: analytics ingest.
    IngestToken,
}

/// A project credential. Only the SHA-256 of its secret part is stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Credential {
    /// Public identifier, embedded in the credential itself.
    pub id: String,
    pub kind: CredentialKind,
    pub project_id: ProjectId,
    pub name: String,
    /// Hex SHA-256 of the secret part.
    pub secret_sha256: String,
    pub created_at_ms: i64,
    pub revoked: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// Creates the first org, owner, project and credentials and the partition table, once.
    /// Applying it to an already bootstrapped cluster changes nothing.
    Bootstrap { org: Org, user: User, project: Project, credentials: Vec<Credential>, partitions: Vec<u64> },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MetaCommandResult {
    Bootstrapped { created: bool },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MetaQuery {
    /// Everything a router caches: partition table, projects and credential hashes.
    View,
    UserByEmail {
        email: String,
    },
}

/// What routers cache from meta, refreshed every second.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetaView {
    pub partitions: Vec<u64>,
    pub orgs: Vec<Org>,
    pub projects: Vec<Project>,
    pub credentials: Vec<Credential>,
}

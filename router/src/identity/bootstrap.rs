//! First start of a cluster: the owner, org, project and credentials a new user starts with.

use rand::distributions::{Alphanumeric, DistString};
use serde::{Deserialize, Serialize};
use sextant_model::meta::{default_plans, CredentialKind, MetaCommand, MetaCommandResult, Org, Project, Role, User};
use sextant_model::partition::default_table;
use sextant_model::{OrgId, ProjectId, UserId};

use crate::cluster::{Cluster, ClusterError};
use crate::identity::auth::{hash_password, new_credential};

/// What `credentials.json` holds (file mode 0600).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Credentials {
    pub url: String,
    pub email: String,
    pub password: String,
    pub project_id: ProjectId,
    pub api_key: String,
    pub ingest_token: String,
}

pub const BOOTSTRAP_EMAIL: &str = "admin@sextant.local";

/// Creates the first org if the cluster has none. Returns the new credentials, or `None` when
/// the cluster had already been bootstrapped (by an earlier start or another router). Waits
/// out leader changes; on return the router's meta cache knows the credentials.
pub async fn bootstrap(cluster: &Cluster, url: &str, plan: &str, now: i64) -> anyhow::Result<Option<Credentials>> {
    let password = Alphanumeric.sample_string(&mut rand::thread_rng(), 20);
    let (org_id, user_id, project_id) = (OrgId::random(), UserId::random(), ProjectId::random());
    let (api_key, key_record) = new_credential(CredentialKind::ApiKey, project_id, "default", now);
    let (ingest_token, token_record) = new_credential(CredentialKind::IngestToken, project_id, "default", now);
    let command = MetaCommand::Bootstrap {
        org: Org {
            id: org_id,
            name: "Default organization".into(),
            plan: plan.into(),
            default_project: project_id,
            created_at_ms: now,
            managed_by: None,
            key: None,
            owner_email: None,
            suspended: false,
        },
        user: User {
            id: user_id,
            org_id,
            email: BOOTSTRAP_EMAIL.into(),
            name: "Admin".into(),
            role: Role::Owner,
            password_hash: hash_password(password.clone()).await?,
            created_at_ms: now,
        },
        project: Project {
            id: project_id,
            org_id,
            name: "default".into(),
            created_at_ms: now,
            managed_by: None,
            key: None,
        },
        credentials: vec![key_record, token_record],
        partitions: default_table(cluster.shard_count()),
    };
    // Plans first: clusters bootstrapped before the catalog existed get it too.
    let _: MetaCommandResult = write_until_done(cluster, &MetaCommand::SeedPlans { plans: default_plans() }).await?;
    let created = match write_until_done(cluster, &command).await? {
        MetaCommandResult::Bootstrapped { created } => created,
        other => anyhow::bail!("unexpected meta answer to the bootstrap: {other:?}"),
    };
    // Load the new credentials into this router before anyone can read them from the file.
    loop {
        match cluster.refresh_meta().await {
            Err(ClusterError::Unavailable(why)) => tracing::warn!(%why, "meta not readable yet; retrying"),
            result => break result?,
        }
    }
    Ok(created.then(|| Credentials {
        url: url.to_owned(),
        email: BOOTSTRAP_EMAIL.into(),
        password,
        project_id,
        api_key,
        ingest_token,
    }))
}

/// A meta write retried, the same command each time, for as long as the cluster answers "try
/// again": right after the groups form, leaders still change. Both commands are idempotent (a
/// bootstrap whose first attempt committed unseen still reports `created`), so a retry cannot
/// lose the credentials this router is about to print.
async fn write_until_done(cluster: &Cluster, command: &MetaCommand) -> Result<MetaCommandResult, ClusterError> {
    loop {
        match cluster.meta_write(command).await {
            Err(ClusterError::Unavailable(why)) => {
                tracing::warn!(%why, "meta not writable yet; retrying the bootstrap")
            }
            result => return result,
        }
    }
}

/// Writes the credentials file readable by its owner only.
pub fn write_credentials(path: &std::path::Path, creds: &Credentials) -> anyhow::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(creds)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

//! The meta group's state: organizations, users, projects, credential hashes and the partition
//! table. Small, so it is snapshotted whole as JSON.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use sextant_model::meta::{Credential, MetaCommand, MetaCommandResult, MetaQuery, MetaView, Org, Project, User};
use sextant_model::{OrgId, ProjectId, UserId};

use crate::state_machine::GroupState;
use crate::types::{Command, CommandResponse};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MetaState {
    orgs: BTreeMap<OrgId, Org>,
    users: BTreeMap<UserId, User>,
    projects: BTreeMap<ProjectId, Project>,
    credentials: BTreeMap<String, Credential>,
    partitions: Vec<u64>,
}

impl MetaState {
    fn execute(&mut self, command: MetaCommand) -> MetaCommandResult {
        match command {
            MetaCommand::Bootstrap { org, user, project, credentials, partitions } => {
                if !self.orgs.is_empty() {
                    return MetaCommandResult::Bootstrapped { created: false };
                }
                self.orgs.insert(org.id, org);
                self.users.insert(user.id, user);
                self.projects.insert(project.id, project);
                for c in credentials {
                    self.credentials.insert(c.id.clone(), c);
                }
                self.partitions = partitions;
                MetaCommandResult::Bootstrapped { created: true }
            }
        }
    }

    pub fn query(&self, query: &MetaQuery) -> serde_json::Value {
        match query {
            MetaQuery::View => serde_json::to_value(MetaView {
                partitions: self.partitions.clone(),
                orgs: self.orgs.values().cloned().collect(),
                projects: self.projects.values().cloned().collect(),
                credentials: self.credentials.values().cloned().collect(),
            }),
            MetaQuery::UserByEmail { email } => {
                let email = email.to_lowercase();
                serde_json::to_value(self.users.values().find(|u| u.email == email))
            }
        }
        .unwrap_or(serde_json::Value::Null)
    }
}

impl GroupState for MetaState {
    fn apply(&mut self, _index: u64, command: Command) -> CommandResponse {
        match command {
            Command::Meta(cmd) => {
                let result = self.execute(cmd);
                CommandResponse::Meta(serde_json::to_vec(&result).unwrap_or_default())
            }
            _ => CommandResponse::Rejected("data command sent to the meta group".into()),
        }
    }

    fn snapshot_writer(&self) -> Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send + Sync> {
        let copy = self.clone();
        Box::new(move |w: &mut dyn Write| serde_json::to_writer(w, &copy).map_err(io::Error::other))
    }

    fn restore(&mut self, input: &mut dyn Read) -> io::Result<()> {
        *self = serde_json::from_reader(input).map_err(io::Error::other)?;
        Ok(())
    }
}

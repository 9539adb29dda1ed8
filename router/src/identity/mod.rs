//! Who is asking: credentials (project API keys and tokens, passwords, access tokens) and the
//! session extractor (`auth`), rate limits (`rate_limit`), and the endpoints of accounts,
//! sessions, members, projects and API keys. `bootstrap` creates a new cluster's first owner.

pub mod account;
pub mod api_keys;
pub mod auth;
pub mod bootstrap;
pub mod members;
pub mod projects;
pub mod rate_limit;
pub mod refresh;
pub mod usage;

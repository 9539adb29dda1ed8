//! Typed identifiers. A `ProjectId` is the tenancy boundary of every row.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            pub fn random() -> Self {
                Self(Uuid::new_v4())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

uuid_id!(
    /// An organization (tenant).
    OrgId
);
uuid_id!(
    /// A user of an organization.
    UserId
);
uuid_id!(
    /// A project: every stored object belongs to exactly one.
    ProjectId
);

/// Maximum length of trace and span ids (OpenTelemetry uses 32 and 16 hex characters).
pub const MAX_ID_LEN: usize = 128;

/// A trace id as sent by the client: non-empty, at most [`MAX_ID_LEN`] visible ASCII characters.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(String);

impl TraceId {
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        validate_id(s).map(|()| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The rule shared by trace ids and span ids.
pub fn validate_id(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("must not be empty");
    }
    if s.len() > MAX_ID_LEN {
        return Err("must be at most 128 characters");
    }
    if !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must contain only visible ASCII characters");
    }
    Ok(())
}

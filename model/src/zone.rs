//! Failure zones of storage nodes (docs/ARCHITECTURE.md, "Zones"): a node's zone is a short
//! name, the value of a Kubernetes node's `topology.kubernetes.io/zone` label or `--zone`.

/// The longest zone name: a Kubernetes label value's limit.
pub const MAX_ZONE_LEN: usize = 63;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    #[error("a zone name has at most {MAX_ZONE_LEN} characters")]
    TooLong,
    #[error(
        "a zone name has only ASCII letters, digits, '-', '_' and '.', and starts and ends with a letter or digit"
    )]
    Invalid,
}

/// The zone a node reports: `None` for an empty (or blank) value, which means "no zone".
pub fn parse_zone(raw: &str) -> Result<Option<String>, ZoneError> {
    let zone = raw.trim();
    if zone.is_empty() {
        return Ok(None);
    }
    if zone.len() > MAX_ZONE_LEN {
        return Err(ZoneError::TooLong);
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let inner = zone.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !inner || !edge(zone.chars().next()) || !edge(zone.chars().last()) {
        return Err(ZoneError::Invalid);
    }
    Ok(Some(zone.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_names_follow_kubernetes_label_values() {
        assert_eq!(parse_zone(" eu-west-1a\n"), Ok(Some("eu-west-1a".into())));
        assert_eq!(parse_zone(""), Ok(None));
        assert_eq!(parse_zone("  \n"), Ok(None));
        assert_eq!(parse_zone(&"a".repeat(63)).map(|z| z.map(|z| z.len())), Ok(Some(63)));
        assert_eq!(parse_zone(&"a".repeat(64)), Err(ZoneError::TooLong));
        assert_eq!(parse_zone("-a"), Err(ZoneError::Invalid));
        assert_eq!(parse_zone("a b"), Err(ZoneError::Invalid));
        assert_eq!(parse_zone("zone/1"), Err(ZoneError::Invalid));
        assert_eq!(parse_zone("é"), Err(ZoneError::Invalid));
    }
}

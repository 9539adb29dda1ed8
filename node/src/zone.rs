//! Where a node learns its failure zone (docs/ARCHITECTURE.md, "Zones"): `--zone`, or a file
//! read again every placement round (`--zone-file`; on Kubernetes a downward-API file holding
//! the pod's `sextant.dev/zone` annotation, which the operator sets from the zone label of the
//! Kubernetes node the pod runs on, and which can appear after the node started).

use std::io::Read;
use std::path::PathBuf;

use sextant_model::zone::{parse_zone, ZoneError};

/// The most of a zone file that is read.
const MAX_ZONE_FILE_BYTES: u64 = 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ZoneSource {
    /// No zone: the node counts in the one "unknown" zone.
    #[default]
    None,
    Fixed(String),
    File(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum ZoneReadError {
    #[error("reading the zone file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("the zone file {path}: {source}")]
    Invalid { path: PathBuf, source: ZoneError },
}

impl ZoneSource {
    /// A file can be empty because its content is not there yet (a new pod's annotation).
    pub fn is_file(&self) -> bool {
        matches!(self, ZoneSource::File(_))
    }

    /// The zone now; `None` from an empty or missing file means "not known yet".
    pub fn read(&self) -> Result<Option<String>, ZoneReadError> {
        match self {
            ZoneSource::None => Ok(None),
            ZoneSource::Fixed(zone) => Ok(Some(zone.clone())),
            ZoneSource::File(path) => {
                let file = match std::fs::File::open(path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(source) => return Err(ZoneReadError::Io { path: path.clone(), source }),
                };
                let mut raw = Vec::new();
                file.take(MAX_ZONE_FILE_BYTES + 1)
                    .read_to_end(&mut raw)
                    .map_err(|source| ZoneReadError::Io { path: path.clone(), source })?;
                let text = String::from_utf8_lossy(&raw);
                parse_zone(&text).map_err(|source| ZoneReadError::Invalid { path: path.clone(), source })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_file_is_read_again_and_may_be_missing_or_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zone");
        let source = ZoneSource::File(path.clone());
        assert_eq!(source.read().unwrap(), None, "no file yet");
        std::fs::write(&path, "").unwrap();
        assert_eq!(source.read().unwrap(), None, "an annotation not set yet is an empty file");
        std::fs::write(&path, "eu-west-1a").unwrap();
        assert_eq!(source.read().unwrap(), Some("eu-west-1a".into()));
        std::fs::write(&path, "eu-west-1b\n").unwrap();
        assert_eq!(source.read().unwrap(), Some("eu-west-1b".into()));
        std::fs::write(&path, "a/b").unwrap();
        assert!(matches!(source.read(), Err(ZoneReadError::Invalid { .. })));
        std::fs::write(&path, "a".repeat(5000)).unwrap();
        assert!(matches!(source.read(), Err(ZoneReadError::Invalid { source: ZoneError::TooLong, .. })));
    }
}

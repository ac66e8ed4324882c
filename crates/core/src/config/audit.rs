//! `[audit]`: where the gateway's signed checkpoints are also kept, outside the store.

use std::path::PathBuf;

use serde::Deserialize;

/// The `[audit]` table as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub witness: Option<RawWitness>,
}

/// `[audit.witness]`: only a file today. An HTTPS endpoint is not built, so it is refused
/// (a witness the gateway would not write is a promise it would not keep).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWitness {
    pub file: Option<String>,
}

/// Audit settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// An append-only file (on another volume, say) that receives every signed checkpoint as
    /// one JSON line, fsync'd: `postern audit verify --witness FILE` holds a store or an
    /// export to it, and the gateway's first signature after start-up requires the store to
    /// still hold its last line. Relative to the config file's directory.
    pub witness_file: Option<PathBuf>,
}

impl RawAudit {
    pub(super) fn build(self) -> Result<Audit, String> {
        let Some(witness) = self.witness else {
            return Ok(Audit::default());
        };
        let file = witness.file.ok_or_else(|| {
            "audit.witness: give `file = \"PATH\"` (an append-only file outside the store)"
                .to_string()
        })?;
        if file.trim().is_empty() {
            return Err("audit.witness.file: empty path".to_string());
        }
        Ok(Audit {
            witness_file: Some(PathBuf::from(file)),
        })
    }
}

//! The self-contained JSONL export: a header line, then event and checkpoint lines, one JSON
//! object each, externally tagged (`{"event":{…}}`) so a reader never buffers a line twice.

use serde::{Deserialize, Serialize};

use crate::chain::{ChainedEvent, Checkpoint};
use crate::verify::ChainRange;

pub const EXPORT_FORMAT: &str = "postern-audit/1";

/// What the export claims to contain: the range requested, per chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportHeader {
    pub format: String,
    pub exported_at: postern_core::Timestamp,
    pub ranges: Vec<ChainRange>,
    /// The public key that signs the checkpoints (informational: verifiers bring their own).
    pub public_key: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExportLine {
    Header(ExportHeader),
    Event(ChainedEvent),
    Checkpoint(Checkpoint),
}

/// Parses one line of an export.
pub fn read_line(line: &str) -> Result<ExportLine, serde_json::Error> {
    serde_json::from_str(line)
}

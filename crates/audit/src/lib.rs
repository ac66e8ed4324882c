//! Postern's audit log: every lifecycle event is a link of a hash chain
//! (`hash = SHA-256(prev_hash ‖ JCS(event))`), chain heads are signed as Ed25519 checkpoints,
//! and [`Verifier`] checks an exported file or a database's rows fully offline, reporting each
//! break with its reason and place. Checkpoints name the one before them, and the verifier
//! also holds a log to a witness's checkpoints and refuses old unsigned history when asked
//! (`verify/signatures.rs`); the rows operator decisions govern are held to their notices
//! (`decisions.rs`).
//!
//! Architecture invariant: depends on `postern-core` only. It knows nothing of SQL, file paths or
//! networks: callers feed it rows or a reader (a JSONL export, a store) and print its [`Report`].
//! The lifecycle rules it checks are core's one table, not a copy.

mod breaks;
mod canonical;
mod chain;
mod decisions;
mod export;
mod fold;
mod pruned;
mod results;
mod rows;
mod seqs;
mod stored;
mod verify;

pub use chain::{
    event_hash, AuditError, ChainedEvent, Checkpoint, CheckpointLink, EventBody, SigningKey,
    VerifyingKey, GENESIS_HASH,
};
pub use decisions::{DecisionCheck, PinRow, RunRow};
pub use export::{
    read_line, verify_export, verify_export_with, ChainHead, ExportHeader, ExportLine,
    EXPORT_FORMAT,
};
pub use pruned::PrunedRange;
pub use results::ResultCheck;
pub use rows::{ExecutionRow, RowCheck};
pub use stored::{EventChunk, EventColumns};
pub use verify::{Break, BreakReason, ChainRange, EventMeta, Report, UnsignedTail, Verifier};

//! The ledger's errors.

use postern_core::lifecycle::TransitionError;
use postern_core::ExecutionId;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("unsupported store URL {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration {version} ({name}) failed: {source}")]
    Migration {
        version: i64,
        name: &'static str,
        source: sqlx::Error,
    },
    #[error("the store's schema is at version {found}, newer than this build knows ({known}); upgrade postern")]
    SchemaTooNew { found: i64, known: i64 },
    #[error("the store's schema is at version {found}, older than this build reads ({known}); open it once with this build's `postern serve` to migrate it, or verify with the build that wrote it")]
    SchemaTooOld { found: i64, known: i64 },
    #[error("no store at {url}: {reason}")]
    NoStore { url: String, reason: String },
    #[error("execution {0} does not exist")]
    UnknownExecution(ExecutionId),
    #[error("execution {execution_id}: {source}")]
    Transition {
        execution_id: ExecutionId,
        source: TransitionError,
    },
    #[error("corrupt ledger row: {0}")]
    Corrupt(String),
    #[error("audit: {0}")]
    Audit(#[from] postern_audit::AuditError),
    #[error("no signing key was given to the ledger: checkpoints cannot be signed")]
    NoSigningKey,
    #[error("the ledger's writer has stopped")]
    Closed,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

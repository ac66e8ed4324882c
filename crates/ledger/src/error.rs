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
    #[error("checkpoints are no longer signed: {0}")]
    SigningRefused(String),
    #[error("the ledger's writer has stopped")]
    Closed,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("gateway instance {instance} lost its lease{}: it dispatches nothing more (restart it to rejoin as a new instance)", by.as_ref().map(|b| format!(" (taken over by {b})")).unwrap_or_default())]
    Fenced {
        instance: String,
        by: Option<String>,
    },
    #[error("store {fault}: {message}")]
    Storage {
        fault: StorageFault,
        message: String,
    },
}

/// What kind of storage fault stopped a read or a write. It decides what a caller does next:
/// wait and try again (`Busy`, `Unavailable`), refuse new work until an operator acts (`Full`,
/// `ReadOnly`), or stop trusting the store (`Corrupt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageFault {
    /// Another writer holds the lock longer than this one would wait.
    Busy,
    /// The database cannot be reached (connection lost, server restarting, file unopenable).
    Unavailable,
    /// No space left for the store.
    Full,
    /// The store (or its disk) accepts no writes.
    ReadOnly,
    /// A row broke one of the store's uniqueness or integrity rules.
    Constraint,
    /// The store's contents cannot be read as written.
    Corrupt,
    /// Anything else the database reported.
    Other,
}

impl std::fmt::Display for StorageFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StorageFault::Busy => "busy (another writer holds the lock)",
            StorageFault::Unavailable => "unavailable (the database cannot be reached)",
            StorageFault::Full => "full (no space left for the store)",
            StorageFault::ReadOnly => "read-only",
            StorageFault::Constraint => "constraint violated",
            StorageFault::Corrupt => "corrupt",
            StorageFault::Other => "failed",
        })
    }
}

impl StorageFault {
    /// A short stable name (a metrics label).
    pub fn label(self) -> &'static str {
        match self {
            StorageFault::Busy => "busy",
            StorageFault::Unavailable => "unavailable",
            StorageFault::Full => "full",
            StorageFault::ReadOnly => "read_only",
            StorageFault::Constraint => "constraint",
            StorageFault::Corrupt => "corrupt",
            StorageFault::Other => "other",
        }
    }

    /// Whether waiting may cure it without an operator (a lock released, a server back).
    pub fn is_transient(self) -> bool {
        matches!(self, StorageFault::Busy | StorageFault::Unavailable)
    }

    /// An SQLite result code (primary or extended) as a fault.
    fn of_sqlite_code(code: i32) -> StorageFault {
        match code & 0xff {
            5 | 6 => StorageFault::Busy,               // SQLITE_BUSY, SQLITE_LOCKED
            13 => StorageFault::Full,                  // SQLITE_FULL
            8 => StorageFault::ReadOnly,               // SQLITE_READONLY
            11 | 26 => StorageFault::Corrupt,          // SQLITE_CORRUPT, SQLITE_NOTADB
            19 => StorageFault::Constraint,            // SQLITE_CONSTRAINT
            10 | 14 | 15 => StorageFault::Unavailable, // SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_PROTOCOL
            _ => StorageFault::Other,
        }
    }

    /// A PostgreSQL SQLSTATE as a fault.
    fn of_sqlstate(state: &str) -> StorageFault {
        match state {
            "53100" => StorageFault::Full,
            "40001" | "40P01" | "55P03" => StorageFault::Busy,
            "25006" => StorageFault::ReadOnly,
            "XX001" | "XX002" => StorageFault::Corrupt,
            s if s.starts_with("23") => StorageFault::Constraint,
            s if s.starts_with("08") || s.starts_with("57P") || s.starts_with("53") => {
                StorageFault::Unavailable
            }
            _ => StorageFault::Other,
        }
    }

    fn of_io(e: &std::io::Error) -> StorageFault {
        match e.kind() {
            std::io::ErrorKind::StorageFull => StorageFault::Full,
            std::io::ErrorKind::ReadOnlyFilesystem => StorageFault::ReadOnly,
            _ => StorageFault::Unavailable,
        }
    }

    fn of_sqlx(e: &sqlx::Error) -> StorageFault {
        match e {
            sqlx::Error::Io(io) => StorageFault::of_io(io),
            sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => StorageFault::Unavailable,
            sqlx::Error::Database(db) => match db.code() {
                Some(code) => match code.parse::<i32>() {
                    // sqlx's SQLite driver reports the numeric result code.
                    Ok(n) => StorageFault::of_sqlite_code(n),
                    Err(_) => StorageFault::of_sqlstate(&code),
                },
                None => StorageFault::Other,
            },
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => StorageFault::Corrupt,
            _ => StorageFault::Other,
        }
    }
}

impl LedgerError {
    /// The storage fault behind this error, if it is one (a refused transition is not).
    pub fn fault(&self) -> Option<StorageFault> {
        match self {
            LedgerError::Database(e) | LedgerError::Migration { source: e, .. } => {
                Some(StorageFault::of_sqlx(e))
            }
            LedgerError::Storage { fault, .. } => Some(*fault),
            LedgerError::Corrupt(_) => Some(StorageFault::Corrupt),
            LedgerError::Io(e) => Some(StorageFault::of_io(e)),
            LedgerError::Closed => Some(StorageFault::Unavailable),
            _ => None,
        }
    }

    /// A storage error with its fault and a message saying what it stopped.
    pub(crate) fn storage(fault: StorageFault, message: impl Into<String>) -> LedgerError {
        LedgerError::Storage {
            fault,
            message: message.into(),
        }
    }

    /// Why this error happened, as a fault and a message (for errors that must be repeated to
    /// every request of a failed batch).
    pub(crate) fn as_fault(&self) -> (StorageFault, String) {
        (
            self.fault().unwrap_or(StorageFault::Other),
            self.to_string(),
        )
    }
}

/// An SQLite error from the writer's own connection, classified.
pub(crate) fn sqlite_error(e: rusqlite::Error) -> LedgerError {
    let fault = match &e {
        rusqlite::Error::SqliteFailure(f, _) => StorageFault::of_sqlite_code(f.extended_code),
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => StorageFault::Corrupt,
        _ => StorageFault::Other,
    };
    LedgerError::storage(fault, format!("sqlite: {e}"))
}

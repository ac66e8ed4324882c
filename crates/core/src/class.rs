//! Action classes and recovery methods: what a tool's side effect is like, and therefore how an
//! unknown outcome may be recovered.

use std::fmt;

/// How a tool's side effect behaves. Declared per tool; decides recovery (contract §4).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    /// No side effect: never matched, every call is a new execution.
    ReadOnly,
    /// The target honours an idempotency key: re-dispatch with the same key is safe.
    IdempotentWrite,
    /// Safe to repeat only while a precondition (queried from the target) still holds.
    ConditionalWrite,
    /// Cannot be repeated safely and cannot be queried: an unknown outcome needs a human.
    Irreversible,
    /// A command on a remote host: recovered through the durable marker on the host.
    RemoteCommand,
}

impl ActionClass {
    pub const ALL: [ActionClass; 5] = [
        ActionClass::ReadOnly,
        ActionClass::IdempotentWrite,
        ActionClass::ConditionalWrite,
        ActionClass::Irreversible,
        ActionClass::RemoteCommand,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionClass::ReadOnly => "read_only",
            ActionClass::IdempotentWrite => "idempotent_write",
            ActionClass::ConditionalWrite => "conditional_write",
            ActionClass::Irreversible => "irreversible",
            ActionClass::RemoteCommand => "remote_command",
        }
    }

    pub fn is_read_only(self) -> bool {
        self == ActionClass::ReadOnly
    }

    /// The recovery method a tool of this class gets when its contract names none.
    pub fn default_recovery(self) -> RecoveryMethod {
        match self {
            ActionClass::ReadOnly => RecoveryMethod::Retry,
            ActionClass::IdempotentWrite => RecoveryMethod::RetrySameKey,
            ActionClass::ConditionalWrite => RecoveryMethod::Precondition,
            ActionClass::Irreversible => RecoveryMethod::Review,
            ActionClass::RemoteCommand => RecoveryMethod::Marker,
        }
    }

    /// Recovery methods that are safe for this class. `retry` (a blind new execution) is safe
    /// only for reads; `retry_same_key` only where the target de-duplicates by key.
    pub fn allows(self, method: RecoveryMethod) -> bool {
        use RecoveryMethod::*;
        match self {
            ActionClass::ReadOnly => method == Retry,
            ActionClass::IdempotentWrite => matches!(method, RetrySameKey | StatusQuery | Review),
            ActionClass::ConditionalWrite => matches!(method, Precondition | StatusQuery | Review),
            ActionClass::Irreversible => matches!(method, Review | StatusQuery),
            ActionClass::RemoteCommand => matches!(method, Marker | Review),
        }
    }
}

impl fmt::Display for ActionClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an execution whose outcome is unknown is brought to a known state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryMethod {
    /// Run it again as a new execution (reads only).
    Retry,
    /// Re-dispatch the same execution with the same idempotency key.
    RetrySameKey,
    /// Ask the target whether the execution's key was applied; if it cannot tell, review.
    StatusQuery,
    /// Query the precondition; re-dispatch only while it still holds, else review.
    Precondition,
    /// Read the durable marker the SSH wrapper left on the host.
    Marker,
    /// Stop and ask a human (`applied` / `not_applied`).
    Review,
}

impl RecoveryMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryMethod::Retry => "retry",
            RecoveryMethod::RetrySameKey => "retry_same_key",
            RecoveryMethod::StatusQuery => "status_query",
            RecoveryMethod::Precondition => "precondition",
            RecoveryMethod::Marker => "marker",
            RecoveryMethod::Review => "review",
        }
    }
}

impl fmt::Display for RecoveryMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

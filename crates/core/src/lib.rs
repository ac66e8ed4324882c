//! Postern's domain core: what an action *is* (the canonical [`ActionRecord`]), how two requests
//! are recognised as the same intent (the keyed [`Fingerprint`]), what a tool's side effect is
//! like ([`ActionClass`], [`ToolContract`]), the execution [`lifecycle`], the
//! [`RecoveryDecision`] taken from a prior execution and the [`FirstStep`] of a new one
//! (contract §6's decision order).
//!
//! Architecture invariant: this crate is pure. No I/O, no clock, no randomness, no async, no
//! SQL, no MCP or HTTP types. Callers pass `now` and ids in; everything here is a function of
//! its arguments, so it can be tested exhaustively and shared by the ledger (which refuses
//! impossible transitions) and the offline audit verifier (which reports them).

pub mod authorization;
pub mod budget;
pub mod canon;
pub mod class;
pub mod config;
pub mod contract;
pub mod digest;
pub mod duration;
pub mod fingerprint;
pub mod hexdigits;
pub mod hosts;
pub mod ids;
pub mod lifecycle;
pub mod record;
pub mod recovery;
pub mod shell;
pub mod terminal_text;

pub use authorization::{first_step, AuthorizationFacts, FirstStep};
pub use class::{ActionClass, RecoveryMethod};
pub use contract::{ChannelKind, ToolContract};
pub use fingerprint::{Fingerprint, FingerprintKey};
pub use ids::{ExecutionId, Timestamp};
pub use lifecycle::{EventKind, Lifecycle, State};
pub use record::{ActionRecord, Arguments};
pub use recovery::{decide, IncomingRequest, PriorExecution, RecoveryDecision};

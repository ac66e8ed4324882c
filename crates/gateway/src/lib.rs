//! Postern's gateway: the pipeline that turns an agent's tool call into at most one action
//! (accept → authorize → dispatch → record → deliver), recovery per DESIGN §4, and the MCP front
//! (Streamable HTTP at `/mcp`, and stdio).
//!
//! Architecture invariant: MCP wire types appear only in `front` (and in `demo_client` and
//! `demo_upstream`, the demo's and the tests' client and upstream server; the channels crate
//! speaks MCP to upstreams on its own side of the `Channel` trait); the
//! pipeline speaks the core's domain types. A call's fate is decided by the ledger's record and
//! the core's recovery decision, never by the transport (JSON-RPC ids and sessions are evidence,
//! not keys).
//!
//! Architecture invariant: a per-use approval is a state of the one execution it was asked
//! for (bound to its fingerprint), never a transport-level prompt: an identical retry sees the
//! same pending record, and only an operator (never an actor) records the decision.
//!
//! Architecture invariant: nothing is sent before `dispatched` is durable, and no answer is
//! given before the target's answer is durable, or, when the store cannot take it, before the
//! agent is told plainly that the request was sent and its outcome is not yet recorded (the
//! gateway keeps writing it until the store takes it).

pub mod demo_client;
pub mod demo_target;
pub mod demo_upstream;
mod error;
pub mod front;
pub mod investigate;
pub mod pins;
mod pipeline;
mod registry;
mod report;
pub mod retention;
pub mod telemetry;
pub mod vault;

pub use error::GatewayError;
pub use pipeline::{
    call_json, now, Cancellation, Decided, DecisionError, Gateway, Notice, PendingDecision,
    RunView, ToolCall, UpstreamToolView, UpstreamView,
};
pub use registry::{Dialers, ListedTool, Registry, Resolved, ResolvedCredential};
pub use report::{Attempt, CallReport};

//! Postern's pipeline: what turns an agent's tool call into at most one action — admission
//! (validation, the intent fingerprint, the durable record), decisions (recovery, approvals,
//! run authorization), dispatch through a [`postern_channels::Channel`], recovery per
//! contract §4, retention, and the investigation of what happened. The MCP front
//! (`postern-front`) hands it [`ToolCall`]s and renders its [`CallReport`]s.
//!
//! Architecture invariant: this crate knows no MCP and no HTTP server: no rmcp, axum or hyper
//! type appears here (a test in the binary's suite checks the crate graph). The pipeline speaks
//! the core's domain types; JSON-RPC ids and sessions are the front's evidence, never keys.
//!
//! Architecture invariant: a per-use approval is a state of the one execution it was asked
//! for (bound to its fingerprint), never a transport-level prompt: an identical retry sees the
//! same pending record, and only an operator (never an actor) records the decision.
//!
//! Architecture invariant: nothing is sent before `dispatched` is durable, and no answer is
//! given before the target's answer is durable, or, when the store cannot take it, before the
//! agent is told plainly that the request was sent and its outcome is not yet recorded (the
//! gateway keeps writing it until the store takes it).

mod clock;
mod decision;
mod error;
mod gateway;
pub mod investigate;
pub mod pins;
mod registry;
mod report;
pub mod retention;
pub mod telemetry;
pub mod vault;

pub use error::GatewayError;
pub use gateway::{
    agent_run, call_json, key_fault, now, BudgetView, Cancellation, Decided, DecisionError,
    Gateway, Notice, Notices, PendingDecision, RunView, Runs, ScopeUse, ToolCall, ToolPolicy,
    UpstreamToolView, UpstreamTools, UpstreamView, VisibleUpstream,
};
pub use registry::{
    execution_status_schema, Dialers, ListedTool, Registry, Resolved, ResolvedCredential,
};
pub use report::{Attempt, CallReport};

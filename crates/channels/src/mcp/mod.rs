//! The MCP channel: tools of upstream MCP servers, called as a normal MCP client (rmcp's).
//!
//! An [`Upstream`] is one server, reached over stdio (a child process the gateway starts in a
//! process group of its own, restarts with backoff when it dies — the group killed whole, so a
//! wrapper's child does not outlive it (`process`) — and whose stderr goes to the gateway's log
//! under the upstream's name) or over Streamable HTTP. Its link is supervised in the background: the
//! tool list is read after every (re)connection and whenever the server sends
//! `notifications/tools/list_changed`; [`Upstream::state`] says whether it is up and what it
//! lists. [`McpTool`] is one upstream tool bound to a contract: the channel the pipeline
//! sends through (a [`Channel`](crate::Channel)).
//!
//! A stdio upstream's process gets a safe base of the gateway's environment and its own `env`
//! table, nothing else (`environment`): the gateway's tokens and secrets never reach it. It is
//! started through the [`Launcher`] it is given (the binary's sandbox), which this crate runs
//! without knowing what it enforces.
//!
//! Requests that are not side effects (resources, prompts, completions, the log level) pass
//! through [`Upstream::pass`], sent once and never recorded as executions; the upstream's
//! notifications outside answers ([`UpstreamEvent`]) are offered to the front, and its
//! questions during a call (sampling, elicitation, roots) go to the caller's client (`client`).
//!
//! Every send stays under the gateway's control: one `tools/call` request per dispatch, never
//! re-sent by the client library — the HTTP transport's `reinit_on_expired_session` is off and
//! its retries are disabled, and no multi-round `call_tool` helper is used. A lost session
//! (404, or an error naming no request in answer to one in the session: the TypeScript SDK's
//! 400 after a restart) means the server did not take the request: it is `NotSent`, and the link
//! is opened again at once. Every request carries
//! `_meta["io.postern/execution-id"]`, so a cooperating server can de-duplicate.
//!
//! A call waits its `timeout` from its sending or its last progress report, never past its
//! `max_duration` (rmcp's own progress-reset timeout, which cancels the request upstream when it
//! passes): a call runs as long as its upstream keeps it alive.
//!
//! Outcomes (`outcome`): a result is `Applied` (`isError: true` is the contract's verdict, by
//! default `Unknown`: an MCP tool error may follow a partial effect; a read's error is
//! `Rejected`); an error after one of the upstream's questions during the call got no answer
//! (Postern or the client refused it) is `Rejected`, retryable, with that reason first;
//! JSON-RPC `-32602` / `-32601` are `Rejected` (retryable: nothing was applied, an identical call
//! may try again); an upstream that is down, or a request the link had closed before taking, or
//! an HTTP connection refused is `NotSent`; anything after the request was handed to a live
//! link — the process died, the connection closed, the timeout passed, another JSON-RPC error —
//! is `Unknown`.

mod client;
mod environment;
mod line_guard;
mod link;
mod outcome;
mod passage;
mod process;
mod progress;
mod reason;
mod session_guard;
mod tool;

pub use client::{forwarded_capabilities, UpstreamEvent};
pub use environment::{child_environment, environment_names, INHERITED_ENV};
pub use link::{Launcher, LinkState, Upstream, UpstreamSpec, UpstreamTool, UpstreamTransport};
pub use passage::PassError;
pub use progress::{handed_on, CountedProgress, OnProgressRead};
pub use session_guard::not_taken;
pub use tool::McpTool;

/// The `_meta` key that carries the execution id on every upstream call.
pub const EXECUTION_ID_META: &str = "io.postern/execution-id";

//! Postern's channels: the only crate that dials targets. Today the HTTP channel
//! ([`http::HttpChannel`]); SSH and upstream MCP come later, each in its own module.
//!
//! Architecture invariant: this crate knows no SQL and no MCP wire types. It takes a fully
//! rendered request (URL, body bytes, credential, idempotency key, timeouts) and returns what
//! happened, classified honestly:
//!
//! * [`http::HttpOutcome::NotSent`] only when it is provable that nothing reached the target
//!   (the connector failed: refused, DNS, TLS, connect timeout; or the request could not even
//!   be built). Such a failure may be retried as a new attempt.
//! * [`http::HttpOutcome::Unknown`] whenever the connection was up and no answer came back
//!   (response timeout, reset, early close) — never `NotSent`, because the request may have
//!   been received and acted on.
//! * [`http::HttpOutcome::Answered`] when the target sent a status line, with the verdict the
//!   tool's [`http::OutcomeRules`] give that status.
//!
//! The channel never retries, never follows redirects and never uses a proxy; the same
//! execution id travels as the idempotency key on every dispatch of that execution. Every
//! secret the channel knows (the credential, and the call's `secret_fields` values in
//! [`http::HttpDispatch::also_redact`]) is replaced by `[REDACTED]` in what the target answers,
//! in each form a target may echo it (raw, base64, percent-encoded, JSON-escaped:
//! [`http::secret_forms`]), before the answer leaves this crate, so the ledger never stores it.
//!
//! A rendered URL keeps its template's origin and path segments ([`http::render_url`]): an
//! argument can never steer a request to another path or host.

pub mod http;

mod error;

pub use error::ChannelError;

//! Postern's channels: the only crate that dials targets. Every channel implements
//! [`Channel`]: built once per tool, it sends an [`Action`] and returns one honest
//! [`Outcome`], and answers recovery's read-only [`Question`]s. The HTTP channel
//! ([`http::HttpChannel`], HTTP/1.1 over TCP or TLS; [`http::HttpTool`] per tool) and the MCP
//! channel ([`mcp::Upstream`], an upstream MCP server over stdio or Streamable HTTP;
//! [`mcp::McpTool`] per tool) and the SSH channel ([`ssh::SshTool`]: remote commands under a
//! durable marker on the host, over kept connections with pinned host keys) are here.
//!
//! Architecture invariant: this crate knows no SQL; MCP wire types appear only in [`mcp`], on
//! the client side of an upstream link, and never cross the [`Channel`] trait. The HTTP
//! channel takes a fully rendered request (URL, body bytes, credential, idempotency key,
//! timeouts) and returns what happened, classified honestly:
//!
//! * [`http::HttpOutcome::NotSent`] only when it is provable that nothing reached the target
//!   (the connector failed: refused, DNS, TLS handshake, connect timeout; the target's TLS
//!   refused the handshake; or the request could not even be built). Such a failure may be
//!   retried as a new attempt.
//! * [`http::HttpOutcome::Unknown`] whenever the connection was up and no answer came back
//!   (response timeout, reset, early close) — never `NotSent`, because the request may have
//!   been received and acted on.
//! * [`http::HttpOutcome::Answered`] when the target sent a status line, with the verdict the
//!   tool's [`http::OutcomeRules`] give that status.
//!
//! The channel never retries a request that may have left, never follows redirects and never
//! uses a proxy; the same execution id travels as the idempotency key on every dispatch of that
//! execution.
//!
//! `https://` targets are dialled with rustls (the ring provider; no OpenSSL), TLS 1.2 and 1.3
//! only, the host name always verified: there is no switch to turn verification off. A tool
//! trusts the webpki roots compiled into the build, or only the CAs of its `http.ca_file`, and
//! may show a credential's client certificate (mTLS): a [`http::TlsProfile`], built once per
//! distinct pair. A handshake that fails — unknown CA, wrong host name, expired certificate,
//! no protocol in common, a client certificate missing or refused — is `NotSent` with a reason
//! naming the host and the cause, never the URL's path or query.
//!
//! Connections are kept and reused (one pool per connect timeout and TLS profile; a TLS
//! handshake costs far more than a request, see docs/performance.md). Reuse keeps the
//! classification: a kept connection the target closed is never written to (the request goes
//! on a new connection, or is `NotSent` when none can be made), and a request whose connection
//! fails once hyper started writing it is `Unknown` and is not sent again. Every
//! secret the channel knows (the credential, and the call's `secret_fields` values in
//! [`http::HttpDispatch::also_redact`]) is replaced by `[REDACTED]` in what the target answers,
//! in each form a target may echo it (raw, base64 — also inside a longer base64 text —,
//! percent-encoded, JSON-escaped, or behind any JSON escapes: [`secret::secret_forms`]), before
//! the answer leaves this crate, so the ledger never stores it; an answer is redacted whole and
//! only then cut at its cap ([`secret::redact_answer`]).
//!
//! A rendered URL keeps its template's origin and path segments ([`http::render_url`]): an
//! argument can never steer a request to another path or host.

pub mod http;
pub mod mcp;
pub mod ssh;

mod channel;
mod error;
pub mod secret;

pub use channel::{
    Action, Answer, AnswerVerdict, AskRefused, Channel, ClientAsker, Outcome, Pending, Progress,
    ProgressSink, Question, Reading,
};
pub use error::ChannelError;

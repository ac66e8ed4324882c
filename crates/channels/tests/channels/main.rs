//! The channels crate's one integration-test binary. Every server is real and listens on
//! 127.0.0.1 only.

// A scenario test reads top to bottom; the bound on function length is for library code.
#![allow(clippy::too_many_lines)]

mod answers;
mod failures;
mod redaction;
mod render;
mod reuse;
mod ssh;
mod support;
mod tls;
mod tls_servers;

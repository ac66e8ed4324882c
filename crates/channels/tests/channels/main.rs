//! The channels crate's one integration-test binary. Every server is real and listens on
//! 127.0.0.1 only.

mod answers;
mod failures;
mod redaction;
mod render;
mod reuse;
mod ssh;
mod support;
mod tls;
mod tls_servers;

//! What `postern demo` runs against, and what the tests reuse: a real invoice HTTP API with
//! failure injection ([`target`]) and echo endpoints ([`echo`]), a raw MCP client over Streamable HTTP ([`client`]), an MCP
//! server to put behind the gateway as an upstream ([`upstream`]), and a certificate authority
//! made in memory ([`ca`]).
//!
//! Architecture invariant: no library crate of the gateway depends on this one; only the
//! binary links it (for `postern demo`), and the test kit and tests use it. It knows nothing of
//! Postern's crates: it is a stand-in for the world outside the gateway.

pub mod ca;
pub mod client;
pub mod echo;
pub mod target;
pub mod upstream;

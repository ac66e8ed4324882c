//! The `postern` binary's one integration-test binary: runs the real executable.

// A scenario test reads top to bottom; the bound on function length is for library code.
#![allow(clippy::too_many_lines)]

mod answer_cap;
mod approvals;
mod audit;
mod audit_tail;
mod bridge;
mod conformance;
mod connect;
mod console;
mod delivery;
mod demo;
mod fair_connections;
mod fingerprint;
mod foreign;
mod harness;
mod hygiene;
mod inspector;
mod interop;
mod investigate;
mod limits;
mod long_calls;
mod lost_answer;
mod oauth;
mod onboarding;
mod pending_cap;
mod proxy_protocol;
mod replicas;
mod result_shapes;
mod resume;
mod serve;
mod session_cap;
mod signer;
mod ssh;
mod starter;
mod stdio;
mod storage;
mod structure;
mod targets;
mod tasks;
mod telemetry;
mod terminal;
mod tls_listener;
mod tls_targets;
mod upstream;
mod upstream_edges;
mod upstream_env;
mod upstream_matrix;
mod upstream_process;
mod upstream_restart;
mod upstream_sandbox;
mod upstream_start;
mod vault;

//! The `postern` binary's one integration-test binary: runs the real executable.

mod approvals;
mod audit;
mod audit_tail;
mod bridge;
mod conformance;
mod connect;
mod demo;
mod fingerprint;
mod foreign;
mod harness;
mod hygiene;
mod inspector;
mod interop;
mod limits;
mod lost_answer;
mod resume;
mod serve;
mod starter;
mod stdio;
mod storage;
mod targets;
mod tasks;
mod tls_listener;
mod tls_targets;
mod upstream;
mod vault;

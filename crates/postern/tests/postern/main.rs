//! The `postern` binary's one integration-test binary: runs the real executable.

mod audit;
mod fingerprint;
mod harness;
mod interop;
mod resume;
mod serve;
mod tasks;

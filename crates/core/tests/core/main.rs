//! The core's one integration-test binary.

mod canon;
mod config;
mod fingerprint;
mod fuzz;
mod lifecycle;
mod recovery;
mod ssh_command;
mod support;

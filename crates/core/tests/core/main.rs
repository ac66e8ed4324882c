//! The core's one integration-test binary.

// A scenario test reads top to bottom; the bound on function length is for library code.
#![allow(clippy::too_many_lines)]

mod budgets;
mod canon;
mod config;
mod config_doc;
mod fingerprint;
mod fuzz;
mod lifecycle;
mod recovery;
mod ssh_command;
mod support;

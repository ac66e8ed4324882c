//! The demo crate's integration tests: the invoice API the demo and the tests call.

// A scenario test reads top to bottom; the bound on function length is for library code.
#![allow(clippy::too_many_lines)]

mod target;

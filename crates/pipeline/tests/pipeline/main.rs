//! The pipeline crate's integration tests: one module per subject.

// A scenario test reads top to bottom; the bound on function length is for library code.
#![allow(clippy::too_many_lines)]

mod approval_model;
mod budget_model;
mod model_support;
mod recovery_model;
mod registry;
mod runs;

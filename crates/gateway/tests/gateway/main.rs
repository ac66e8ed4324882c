//! The gateway crate's integration tests: one module per subject.

mod approval_model;
mod demo_target;
mod model_support;
mod recovery_model;
mod registry;
mod runs;

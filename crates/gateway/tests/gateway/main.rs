//! The gateway crate's integration tests: one module per subject.

mod approval_model;
mod demo_target;
mod recovery_model;
mod registry;

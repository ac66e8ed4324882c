//! The `postern` binary's one integration-test binary: runs the real executable.

mod fingerprint;

//! The SSH channel: remote commands run at most once under a durable marker on the host.
//!
//! A tool's command template is rendered with every argument quoted for a POSIX shell
//! ([`command`]); the command is sent inside the marker protocol's script ([`marker`]) over a
//! kept, pinned-host-key connection ([`link`]); what came of it is read from the host's
//! marker on recovery ([`SshTool`]'s answer to [`Question::Marker`](crate::Question)).

pub mod command;
mod link;
pub mod marker;
mod tool;

pub use link::{check_private_key, SshLinks};
pub use tool::SshTool;

//! A stdio upstream's process, in a process group of its own.
//!
//! A server is often started through a wrapper (`npx`, `npm exec`, `sh -c`, `uv run`) that runs
//! the real server as its child, sharing its stdio pipes. Killing only the direct child would
//! leave that server running, still holding the pipes, so the link would look up while nobody
//! supervises it. So the program (the launcher execs it: the group is the program's) leads a
//! new process group; the link watches the direct child, and when it exits the link is ended
//! even if a grandchild still answers; dropping a [`Process`] kills the whole group.

use std::process::{ExitStatus, Stdio};

use rustix::process::{kill_process_group, Pid, Signal};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

/// The upstream's running process (the group leader); its group is killed when dropped.
pub(super) struct Process {
    child: tokio::process::Child,
    pid: u32,
    exited: Option<ExitStatus>,
}

/// The pipes of a started process.
pub(super) type Pipes = (ChildStdin, ChildStdout, ChildStderr);

impl Process {
    /// Starts `command` (its stdio piped) as the leader of a new process group.
    pub fn spawn(mut command: Command) -> std::io::Result<(Process, Pipes)> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let pid = child.id().unwrap_or_default();
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let process = Process {
            child,
            pid,
            exited: None,
        };
        match pipes {
            (Some(i), Some(o), Some(e)) => Ok((process, (i, o, e))),
            _ => Err(std::io::Error::other("the child process has no pipes")),
        }
    }

    /// The direct child's pid (also its process group's id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits until the direct child exits (cancel-safe); why, in words.
    pub async fn exited(&mut self) -> String {
        let status = match self.exited {
            Some(s) => Ok(s),
            None => self.child.wait().await,
        };
        match status {
            Ok(s) => {
                self.exited = Some(s);
                format!(
                    "its process {} (the command's own) exited ({s}); the rest of its process group is stopped",
                    self.pid
                )
            }
            Err(e) => format!("its process {} cannot be watched: {e}", self.pid),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // The whole group: a wrapper's children hold the pipes and would serve on unseen. The
        // group outlives its leader while any member lives, so its id is not reused before.
        if let Some(group) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) {
            match kill_process_group(group, Signal::KILL) {
                Ok(()) => {
                    tracing::debug!(pgid = self.pid, "the upstream's process group was killed")
                }
                // ESRCH: nothing of the group is left.
                Err(e) if e == rustix::io::Errno::SRCH => {}
                Err(e) => {
                    tracing::warn!(pgid = self.pid, error = %e, "the upstream's process group could not be killed")
                }
            }
        }
        // The direct child is reaped by tokio (`kill_on_drop`).
    }
}

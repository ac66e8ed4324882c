//! [`SshTool`]: a `remote_command` (or any ssh) tool as a [`Channel`]: the command rendered
//! from its template, run once under the durable marker protocol, its marker read on recovery.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use postern_core::contract::SshSpec;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use crate::channel::{Action, Answer, AnswerVerdict, Channel, Outcome, Pending, Question, Reading};
use crate::secret::{redact_answer, Credential, Secret};
use crate::ssh::command::render;
use crate::ssh::link::{Endpoint, SshLinks};
use crate::ssh::marker::{self, MarkerDir, Report};

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long recovery waits for a command still running on the host before saying so.
const ATTACH_WAIT: Duration = Duration::from_secs(30);

pub struct SshTool {
    spec: SshSpec,
    /// The contract's defaults, for placeholders a call leaves out.
    defaults: Map<String, Value>,
    links: Arc<SshLinks>,
    max_response_bytes: usize,
    /// The marker directory's absolute path on the host, learned once before the first call
    /// is recorded ([`Channel::locate`]).
    located: tokio::sync::OnceCell<String>,
    /// Why the last attempt to learn it failed, for the refusal of a call recorded without it.
    not_located: std::sync::Mutex<Option<String>>,
}

impl SshTool {
    pub fn new(
        spec: &SshSpec,
        defaults: &Map<String, Value>,
        links: Arc<SshLinks>,
        max_response_bytes: usize,
    ) -> SshTool {
        SshTool {
            spec: spec.clone(),
            defaults: defaults.clone(),
            links,
            max_response_bytes,
            located: tokio::sync::OnceCell::new(),
            not_located: std::sync::Mutex::new(None),
        }
    }

    fn endpoint<'a>(&'a self, key: &'a Secret) -> Endpoint<'a> {
        Endpoint {
            host: &self.spec.host,
            port: self.spec.port,
            user: &self.spec.user,
            host_key: &self.spec.host_key,
            key,
            connect_timeout: CONNECT_TIMEOUT,
        }
    }

    fn name(&self) -> String {
        format!("{}@{}:{}", self.spec.user, self.spec.host, self.spec.port)
    }

    /// What the command's exit code says about its effect.
    fn verdict(&self, exit_code: i32) -> AnswerVerdict {
        if exit_code == 0 {
            AnswerVerdict::Applied
        } else if self.spec.unchanged_exit_codes.contains(&exit_code) {
            AnswerVerdict::Rejected { retryable: false }
        } else {
            AnswerVerdict::Unknown
        }
    }

    /// The stored answer: exit code and output, every secret redacted, capped as a whole
    /// (the output is shortened, never the JSON text cut).
    fn answer(&self, exit_code: i32, stdout: &[u8], stderr: &[u8], action: &Action<'_>) -> Answer {
        let needles = action.redaction_needles();
        let clean = |b: &[u8]| redact_answer(b, usize::MAX, &needles, true);
        let (stdout, stderr) = (clean(stdout), clean(stderr));
        let size = (stdout.len() + stderr.len()) as u64;
        // Room for the JSON around the output; each stream gets at most half the rest.
        let room = self.max_response_bytes.saturating_sub(256) / 2;
        let truncated = stdout.len() > room || stderr.len() > room;
        let text = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(room)]).into_owned();
        let body = json!({
            "exit_code": exit_code,
            "stdout": text(&stdout),
            "stderr": text(&stderr),
            "stdout_bytes": stdout.len(),
            "stderr_bytes": stderr.len(),
            "truncated": truncated,
        });
        Answer {
            status: None,
            verdict: self.verdict(exit_code),
            body: serde_json::to_vec(&body).unwrap_or_default(),
            size,
            truncated,
            whole: None,
        }
    }

    /// Where this execution's marker is: the directory its record names. A record that says
    /// none was known (the host could not be reached to learn it) is `Err`: such a call is
    /// never sent. A record from before records named it, or none looked up: resolved by the
    /// host as then.
    fn marker_dir<'a>(&'a self, action: &'a Action<'_>) -> Result<MarkerDir<'a>, String> {
        let recorded = action.recorded_target.as_ref();
        match recorded.and_then(|t| t.get("marker_dir")) {
            Some(Value::String(dir)) => Ok(MarkerDir::Recorded(dir)),
            Some(_) => {
                let why = self.not_located.lock().ok().and_then(|w| w.clone());
                Err(format!(
                    "the marker directory on {} could not be learned before the call was recorded ({}): nothing was sent",
                    self.name(),
                    why.as_deref().unwrap_or("the host could not be reached")
                ))
            }
            None => Ok(MarkerDir::Resolved(self.spec.marker_dir.as_deref())),
        }
    }

    /// Learns the marker directory's absolute path from the host (making it if missing).
    async fn learn_marker_dir(&self, key: &Secret) -> Result<String, String> {
        let nonce = nonce("locate");
        let script =
            marker::locate_script(&nonce, MarkerDir::Resolved(self.spec.marker_dir.as_deref()));
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let end = self
            .links
            .run(&self.endpoint(key), &script, deadline)
            .await?;
        match marker::parse(&end.stdout, &nonce) {
            Some(Report::Located(dir)) => Ok(dir),
            Some(Report::Refused(why)) => Err(why),
            _ => Err(end
                .cut
                .unwrap_or_else(|| "the host did not say where its marker directory is".into())),
        }
    }

    async fn dispatch(&self, action: Action<'_>) -> Outcome {
        let Some(Credential::PrivateKey(key)) = &action.credential else {
            return Outcome::NotSent {
                reason: "the tool's credential is not an ssh_key: nothing was sent".into(),
            };
        };
        let dir = match self.marker_dir(&action) {
            Ok(dir) => dir,
            Err(reason) => return Outcome::NotSent { reason },
        };
        let command = match render(
            &self.spec.command,
            action.arguments,
            &self.defaults,
            &|_, v| v,
        ) {
            Ok(c) => c,
            Err(reason) => return Outcome::NotSent { reason },
        };
        let nonce = nonce(action.execution_id);
        let script = marker::dispatch_script(
            &nonce,
            action.execution_id,
            action.intent,
            &command,
            self.spec.cwd.as_deref(),
            dir,
        );
        let deadline = Instant::now() + self.spec.timeout;
        let end = match self.links.run(&self.endpoint(key), &script, deadline).await {
            Ok(end) => end,
            Err(reason) => return Outcome::NotSent { reason },
        };
        let cut = end
            .cut
            .unwrap_or_else(|| "the script ended without a report".into());
        match marker::parse(&end.stdout, &nonce) {
            Some(Report::Refused(why)) => Outcome::NotSent {
                reason: format!("{}: {why}; the command did not run", self.name()),
            },
            Some(Report::Finished {
                exit_code,
                stdout,
                stderr,
            }) => Outcome::Answered(self.answer(exit_code, &stdout, &stderr, &action)),
            Some(Report::ClaimedBefore) => Outcome::Unknown {
                reason: format!("an earlier dispatch of this execution holds its marker on {}: the retry reads the marker", self.name()),
            },
            Some(Report::Claimed) => Outcome::Unknown {
                reason: format!("the command started on {} and {cut} before it ended; it keeps running there, and the marker tells what became of it", self.name()),
            },
            Some(Report::Lost) => Outcome::Unknown {
                reason: format!("the command's runner on {} ended without recording an exit code", self.name()),
            },
            _ => Outcome::Unknown {
                reason: format!("{cut} before {} reported the claim: the marker tells whether the command started", self.name()),
            },
        }
    }

    /// Reads the execution's marker, waiting (bounded) while the command still runs.
    async fn read_marker(&self, action: Action<'_>) -> Reading {
        let Some(Credential::PrivateKey(key)) = &action.credential else {
            return Reading::NoAnswer;
        };
        // A record that names no directory was never sent.
        let Ok(dir) = self.marker_dir(&action) else {
            return Reading::NotFound;
        };
        let waited_until = Instant::now() + ATTACH_WAIT.min(self.spec.timeout);
        let mut pause = Duration::from_millis(50);
        loop {
            let nonce = nonce(action.execution_id);
            let script = marker::query_script(&nonce, action.execution_id, action.intent, dir);
            let deadline = Instant::now() + CONNECT_TIMEOUT;
            let Ok(end) = self.links.run(&self.endpoint(key), &script, deadline).await else {
                return Reading::NoAnswer;
            };
            let report = marker::parse(&end.stdout, &nonce);
            match report {
                Some(Report::Finished {
                    exit_code,
                    stdout,
                    stderr,
                }) => return Reading::Yes(self.answer(exit_code, &stdout, &stderr, &action)),
                Some(Report::None) => return Reading::NotFound,
                // Half-run, another intent's marker, or a claim that never started and now
                // never will: a person decides.
                Some(Report::Dead | Report::Foreign | Report::Abandoned) => return Reading::No,
                Some(Report::Running | Report::Starting) if Instant::now() < waited_until => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                // Still running after the wait: in progress, settled by a later retry.
                Some(Report::Running) => return Reading::NoAnswer,
                // A claim whose runner never took the start gate nor let the query take it.
                Some(Report::Starting) => return Reading::No,
                // The directory the record names is gone or unreadable: not "never started".
                Some(Report::Unreadable) => return Reading::NoAnswer,
                _ => return Reading::NoAnswer,
            }
        }
    }
}

/// A nonce for one script's report lines: unique per process and execution, unknown to the
/// command (whose output never precedes the report line that gives its size anyway).
fn nonce(execution_id: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(execution_id.as_bytes());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("POSTERN-{:016x}", h.finish())
}

impl Channel for SshTool {
    fn target(
        &self,
        arguments: &Map<String, Value>,
        secret: &dyn Fn(&str) -> bool,
    ) -> Result<Value, String> {
        let shown = |name: &str, value: String| {
            if secret(name) {
                "***".to_string()
            } else {
                value
            }
        };
        let command = render(&self.spec.command, arguments, &self.defaults, &shown)?;
        Ok(json!({
            "target": self.name(),
            "command": command,
            "cwd": self.spec.cwd,
            "marker_dir": self.located.get(),
        }))
    }

    fn send<'a>(&'a self, action: Action<'a>) -> Pending<'a, Outcome> {
        Box::pin(self.dispatch(action))
    }

    fn ask<'a>(&'a self, question: Question, action: Action<'a>) -> Option<Pending<'a, Reading>> {
        match question {
            Question::Marker => Some(Box::pin(self.read_marker(action))),
            Question::Status | Question::Precondition => None,
        }
    }

    fn locate<'a>(
        &'a self,
        credential: &dyn Fn() -> Option<Credential>,
    ) -> Option<Pending<'a, ()>> {
        if self.located.initialized() {
            return None;
        }
        let Some(Credential::PrivateKey(key)) = credential() else {
            return None;
        };
        Some(Box::pin(async move {
            let learned = self
                .located
                .get_or_try_init(|| self.learn_marker_dir(&key))
                .await;
            if let Err(why) = learned {
                if let Ok(mut last) = self.not_located.lock() {
                    *last = Some(why.clone());
                }
                tracing::warn!(target_host = %self.name(), reason = %why, "the marker directory could not be learned: calls are recorded without one and not sent until it is");
            }
        }))
    }
}

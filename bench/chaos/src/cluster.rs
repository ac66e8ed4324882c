//! The gateways under test: `postern serve` replicas on fixed loopback ports (a restart comes
//! back where the balancer expects it), each with its own directory and the same config.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const FP_KEY: &str = "5151515151515151515151515151515151515151515151515151515151515151";
pub const SIGNING_KEY: &str = "6262626262626262626262626262626262626262626262626262626262626262";
pub const AGENT_TOKEN: &str = "chaos-agent-token-0123456789abcdef";
pub const OPERATOR_TOKEN: &str = "chaos-operator-token-0123456789abcdef";
/// Short enough that a paused or killed replica is taken over during the run.
pub const LEASE: Duration = Duration::from_secs(2);

/// What the run's budgets allow (issue 53): at most this many invoices, and at most this sum
/// of their amounts, in the hour (the whole run). Past either, a call is refused.
#[derive(Clone, Copy)]
pub struct Limits {
    pub max_calls: u64,
    pub max_sum: i64,
}

impl Limits {
    /// Limits the run reaches about half way: intents number somewhat fewer than the calls
    /// made (retries), and amounts average 500 (seed 18: the sum binds first).
    pub fn for_calls(calls: u64) -> Limits {
        Limits {
            max_calls: calls / 2,
            max_sum: i64::try_from(calls).unwrap_or(i64::MAX / 500) * 240,
        }
    }
}

/// The replicas' config: one tool in front of the target (through the fault proxy), recovered
/// by asking the target whether it applied the execution's idempotency key, and two budgets
/// on it that refuse past their limits.
pub fn config(store: &str, target: &str, limits: Limits) -> String {
    format!(
        r#"[gateway]
store = "{store}"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}
instance_lease = "{}s"
attach_wait = "2s"
max_calls_per_actor = 512
max_connections_per_actor = 4096
max_connections = 4096
trusted_proxies = ["{proxy}"]

[[actor]]
name = "agents"
token = {{ file = "agent.token" }}

[[operator]]
name = "chaos"
token = {{ file = "operator.token" }}

[[tool]]
name = "create_invoice"
description = "Create an invoice"
class = "idempotent_write"
match_window = "1h"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "http://{target}/invoices", connect_timeout = "1s", response_timeout = "1s" }}
recovery = {{ status_query = {{ method = "GET", url = "http://{target}/invoices?idempotency_key={{execution_id}}" }} }}

[[budget]]
name = "invoices"
tools = ["create_invoice"]
window = "1h"
max_calls = {max_calls}
on_exhausted = "refuse"

[[budget]]
name = "invoiced"
tools = ["create_invoice"]
window = "1h"
sum = "amount"
max_sum = {max_sum}
on_exhausted = "refuse"
"#,
        LEASE.as_secs(),
        max_calls = limits.max_calls,
        max_sum = limits.max_sum,
        // HAProxy names each agent's address in a PROXY v2 header, from this address.
        proxy = postern_testkit::balancer::PROXY_SOURCE,
    )
}

pub struct Replica {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    /// How many times it was started.
    pub starts: u32,
}

fn private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("a key file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

impl Replica {
    pub fn new(dir: PathBuf, config_text: &str) -> Replica {
        std::fs::create_dir_all(&dir).expect("the replica's directory");
        std::fs::write(dir.join("postern.toml"), config_text).expect("its config");
        for (file, text) in [
            ("fp.key", FP_KEY),
            ("signing.key", SIGNING_KEY),
            ("agent.token", AGENT_TOKEN),
            ("operator.token", OPERATOR_TOKEN),
        ] {
            private(&dir.join(file), text);
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        Replica {
            port,
            dir,
            child: None,
            starts: 0,
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it and waits for its "listening" line (it may have to wait for the database).
    pub fn start(&mut self, postern: &Path) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("serve.log"))
            .expect("its log");
        for _ in 0..60 {
            let mut child = Command::new(postern)
                .args(["serve", "-c"])
                .arg(self.dir.join("postern.toml"))
                .args(["--listen", &self.addr()])
                .env("POSTERN_LOG", "warn")
                .stdout(Stdio::piped())
                .stderr(log.try_clone().expect("its log"))
                .spawn()
                .expect("postern serve starts");
            let mut line = String::new();
            let _ = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
            if line.starts_with("postern listening on") {
                self.child = Some(child);
                self.starts += 1;
                return;
            }
            // The port not free yet, or the database restarting: try again shortly.
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "replica on {} did not start; see {}",
            self.addr(),
            self.dir.join("serve.log").display()
        );
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn signal(&self, name: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([&format!("-{name}"), &c.id().to_string()])
                .status();
        }
    }

    /// Whether it exited by itself (a taken-over replica stops with 75); reaps it.
    pub fn exited(&mut self) -> Option<i32> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status.code().unwrap_or(-1))
            }
            _ => None,
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGINT, and wait for it to stop.
    pub fn stop(&mut self) {
        self.signal("INT");
        if let Some(mut c) = self.child.take() {
            for _ in 0..400 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

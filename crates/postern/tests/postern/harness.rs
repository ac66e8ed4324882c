//! A real `postern serve` process in front of a real invoice API, and a raw MCP client that can
//! cut its own connection.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use postern_demo::client::{response_message, ClientError, McpClient};
use serde_json::Value;

pub const BILLING_TOKEN: &str = "billing-token-0123456789abcdef";
pub const OPS_TOKEN: &str = "ops-token-0123456789abcdef0123";
/// The operator of the tests that configure one (`[[operator]] name = "alice"`).
pub const ALICE_TOKEN: &str = "alice-operator-token-0123456789";

pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let d = std::env::temp_dir().join(format!("postern-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The test configuration: tools in front of the invoice API at `target`.
pub fn config(target: &str) -> String {
    format!(
        r#"
[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}
attach_wait = "10s"
max_body_bytes = 65536

[[actor]]
name = "billing"
token = {{ file = "billing.token" }}

[[actor]]
name = "ops"
token = {{ file = "ops.token" }}

[[tool]]
name = "create_invoice"
description = "Create an invoice"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], additionalProperties = false, properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}
recovery = {{ status_query = {{ method = "GET", url = "{target}/invoices?idempotency_key={{execution_id}}" }} }}

[[tool]]
name = "create_invoice_resend"
description = "Create an invoice (recovered by re-sending with the same key)"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[tool]]
name = "send_wire"
description = "Send money (irreversible)"
class = "irreversible"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[tool]]
name = "list_invoices"
description = "List invoices"
class = "read_only"
http = {{ method = "GET", url = "{target}/invoices" }}
"#
    )
}

/// Writes the config, keys and tokens into `dir` (files already there are kept).
pub fn prepare(dir: &Path, config_text: &str) {
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        if !p.exists() {
            std::fs::write(p, text).unwrap();
        }
    };
    write("postern.toml", config_text);
    let secrets = [
        (
            "fp.key",
            "7f3a1e0b6a2d4f5e7c9b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f",
        ),
        (
            "signing.key",
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        ),
        ("billing.token", BILLING_TOKEN),
        ("ops.token", OPS_TOKEN),
    ];
    for (name, text) in secrets {
        write_private(&dir.join(name), text);
    }
}

/// Writes a secret file readable by its owner only (the gateway refuses any other), keeping
/// one that exists.
pub fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    if !path.exists() {
        std::fs::write(path, text).unwrap();
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// `postern serve` on the config in `dir` must exit 2 (an error) without serving; its stderr.
pub fn serve_refuses(dir: &Path) -> String {
    serve_refuses_with_env(dir, &[])
}

/// As [`serve_refuses`], with these variables added to the gateway's environment.
pub fn serve_refuses_with_env(dir: &Path, env: &[(&str, &str)]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_postern"))
        .envs(env.iter().copied())
        .args(["serve", "-c", dir.join("postern.toml").to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            assert_eq!(status.code(), Some(2), "postern serve: {stderr}");
            return stderr;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("postern serve started instead of refusing the config");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The audit public key of the gateway in `dir`, written beside its signing key.
pub fn public_key_file(dir: &Path) -> PathBuf {
    let public = dir.join("signing.pub");
    let key = postern_audit::SigningKey::from_hex(
        std::fs::read_to_string(dir.join("signing.key"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    std::fs::write(&public, key.verifying_key().to_string()).unwrap();
    public
}

/// The MCP URL a just-started `postern serve` prints as its first line.
pub fn listening_url(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix("postern listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string()
}

/// `postern serve` with the config already in `dir`, its JSON log at trace level written to
/// `log`: the process and its MCP URL.
pub fn serve_logging_to(dir: &Path, log: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["serve", "-c", dir.join("postern.toml").to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
        .env("POSTERN_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let url = listening_url(&mut child);
    (child, url)
}

pub struct Served {
    child: Child,
    pub url: String,
    pub dir: PathBuf,
}

impl Served {
    /// Writes the config and keys into `dir` (once) and starts `postern serve` on a free port.
    pub fn start(dir: &Path, config_text: &str) -> Served {
        Served::start_on(dir, config_text, "127.0.0.1:0")
    }

    /// As [`Served::start`], listening on `listen` (e.g. the address of a gateway just stopped).
    pub fn start_on(dir: &Path, config_text: &str, listen: &str) -> Served {
        prepare(dir, config_text);
        Served::spawn(dir, listen)
    }

    /// Starts `postern serve` with the config already in `dir`, listening on `listen`.
    pub fn spawn(dir: &Path, listen: &str) -> Served {
        Served::spawn_with_env(dir, listen, &[])
    }

    /// As [`Served::spawn`], with these variables added to the gateway's environment.
    pub fn spawn_with_env(dir: &Path, listen: &str, env: &[(&str, &str)]) -> Served {
        let mut command = Command::new(env!("CARGO_BIN_EXE_postern"));
        command.envs(env.iter().copied());
        Served::spawn_command(dir, listen, command)
    }

    /// As [`Served::spawn`], run by `command` (a binary, user and environment of the test's
    /// own) with `serve`'s arguments added.
    pub fn spawn_command(dir: &Path, listen: &str, mut command: Command) -> Served {
        let mut child = command
            .args([
                "serve",
                "-c",
                dir.join("postern.toml").to_str().unwrap(),
                "--listen",
                listen,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let url = listening_url(&mut child);
        Served {
            child,
            url,
            dir: dir.to_path_buf(),
        }
    }

    /// The process id (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `127.0.0.1:PORT`, the address it listens on.
    pub fn addr(&self) -> &str {
        self.url
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
    }

    /// SIGINT, the graceful shutdown; waits (bounded) until the process has exited.
    pub fn stop(mut self) {
        let sent = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        for _ in 0..400 {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "postern serve exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("postern serve did not stop within 10 s of SIGINT");
    }

    /// SIGTERM; waits (bounded: a gateway drains running executions for at most 30 s) for the
    /// process to exit, and returns how it exited.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "postern serve did not exit within 40 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How the process exited, if it does within `within` (without signalling it).
    pub fn exited_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Sends a signal by name (`STOP`, `CONT`, …).
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name}");
    }

    /// `kill -9`.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn store(&self) -> String {
        format!("sqlite://{}", self.dir.join("ledger.db").display())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The raw MCP client of `postern demo`, unwrapped for tests.
pub struct Mcp(McpClient);

/// reqwest is built with rustls and no provider of its own (for `postern connect https://`): it
/// takes the process's default, which is installed first.
pub fn http_builder() -> reqwest::ClientBuilder {
    postern_channels::http::install_default_provider();
    reqwest::Client::builder()
}

/// A client builder whose connections come from the loopback address `from` (all of 127/8 is
/// loopback): another client, as far as the gateway's per-address limits and records go.
pub fn http_from(from: [u8; 4]) -> reqwest::ClientBuilder {
    http_builder().local_address(std::net::IpAddr::from(from))
}

/// `postern audit export` of the gateway configured in `dir`: the export's text, and its
/// `accepted` event for a call of `tool`.
pub fn exported_acceptance(dir: &Path, tool: &str) -> (String, String) {
    let (export, accepted) = exported_acceptances(dir, tool);
    let first = accepted
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no accepted event of {tool}: {export}"));
    (export, first)
}

/// `postern audit export` of the gateway configured in `dir`: the export's text, and every
/// `accepted` event of a call of `tool`.
pub fn exported_acceptances(dir: &Path, tool: &str) -> (String, Vec<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .current_dir(dir)
        .args(["audit", "export", "-c", "postern.toml", "--out", "a.jsonl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let export = std::fs::read_to_string(dir.join("a.jsonl")).unwrap();
    let accepted = export
        .lines()
        .filter(|l| l.contains("\"accepted\"") && l.contains(tool))
        .map(str::to_string)
        .collect();
    (export, accepted)
}

/// Whether some call of `tool` was accepted for `actor` acting for `subject` (the export).
pub fn assert_acted_for(dir: &Path, tool: &str, actor: &str, subject: &str) {
    let (export, accepted) = exported_acceptances(dir, tool);
    assert!(
        accepted
            .iter()
            .any(|l| l.contains(&format!("\"actor\":\"{actor}\""))
                && l.contains(&format!("\"subject\":\"{subject}\""))),
        "no call of {tool} by {actor} for {subject}: {export}"
    );
}

/// The gateway's Prometheus text at `{base}/metrics`, asked as operator alice.
pub async fn metrics(base: &str) -> String {
    let response = http_client()
        .get(format!("{base}/metrics"))
        .bearer_auth(ALICE_TOKEN)
        .send()
        .await;
    response.unwrap().text().await.unwrap()
}

/// `GET url` of the operator API as operator alice ([`ALICE_TOKEN`]), over `http`: its JSON.
pub async fn ops_get(http: &reqwest::Client, url: &str) -> Value {
    let response = http.get(url).bearer_auth(ALICE_TOKEN).send().await;
    response.unwrap().json().await.unwrap()
}

pub fn http_client() -> reqwest::Client {
    http_builder().build().expect("an HTTP client")
}

pub fn sse_message(body: &str) -> Value {
    response_message(body).unwrap_or_else(|| panic!("no JSON-RPC response in {body:?}"))
}

impl Mcp {
    pub async fn connect(url: &str, token: &str) -> Mcp {
        Mcp(McpClient::connect(url, token, "postern-tests")
            .await
            .unwrap())
    }

    /// As [`Mcp::connect`], with the client name the agent gives in `initialize`.
    pub async fn connect_as(url: &str, token: &str, client_name: &str) -> Mcp {
        Mcp(McpClient::connect(url, token, client_name).await.unwrap())
    }

    /// Its run in the Sessions log (`mcp-session:<session id>`).
    pub fn run_id(&self) -> String {
        format!("mcp-session:{}", self.0.session())
    }

    /// Ends the session (`DELETE /mcp`); the HTTP status.
    pub async fn close(&self) -> u16 {
        self.0.close().await.unwrap()
    }

    /// From the loopback address `from`, to `url`.
    pub async fn connect_from(from: [u8; 4], url: &str, token: &str) -> Mcp {
        let http = http_from(from).build().unwrap();
        Mcp::connect_with(http, url, token).await.unwrap()
    }

    /// Over `http`, a client of the test's choosing (one that trusts a test CA, say).
    pub async fn connect_with(
        http: reqwest::Client,
        url: &str,
        token: &str,
    ) -> Result<Mcp, ClientError> {
        McpClient::connect_with(http, url, token, "postern-tests")
            .await
            .map(Mcp)
    }

    /// POSTs a raw body; with a timeout, the connection is cut when it fires.
    pub async fn raw(
        &self,
        body: &str,
        timeout: Option<Duration>,
    ) -> Result<(u16, String), ClientError> {
        self.0.raw(body, timeout).await
    }

    pub fn request(&self, tool: &str, arguments: Value, extra: Value) -> String {
        self.0.request(tool, arguments, extra).1
    }

    /// A `tools/call`, returning the JSON-RPC response message.
    pub async fn call(&self, tool: &str, arguments: Value, extra: Value) -> Value {
        self.0.call(tool, arguments, extra).await.unwrap()
    }
}

/// `result.structuredContent.execution` of a successful response.
pub fn execution(response: &Value) -> &Value {
    &response["result"]["structuredContent"]["execution"]
}

/// The execution id of a successful response.
pub fn execution_id(response: &Value) -> String {
    execution(response)["execution_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no execution id in {response}"))
        .to_string()
}

/// Waits until `f` holds (bounded), polling.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// `postern activity <args> --json --store …`, parsed.
pub fn activity(dir: &Path, args: &[&str]) -> Value {
    let store = format!("sqlite://{}", dir.join("ledger.db").display());
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .arg("activity")
        .args(args)
        .args(["--json", "--store", &store])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "postern activity {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// How many POSTs (creations) reached the target.
pub fn posts(target: &postern_demo::target::InvoiceApi) -> usize {
    target
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

/// A new, empty database on the machine's PostgreSQL (`POSTERN_TEST_PG`, the admin URL the
/// ledger's conformance suite uses); its URL.
pub async fn fresh_postgres() -> String {
    use postern_testkit::postgres::{test_admin_url, FreshDatabase};
    // Kept for the whole test: dropped by a later run once this process is gone.
    FreshDatabase::create(&test_admin_url(), "postern_test").keep()
}

/// `postern ARGS` as operator alice against the gateway; (exit code, stdout, stderr).
pub fn operator(served: &Served, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(args)
        .args(["--gateway", &served.url])
        .env("POSTERN_OPERATOR_TOKEN", ALICE_TOKEN)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// As [`operator`], expecting success and JSON (`--json`).
pub fn operator_json(served: &Served, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let (code, out, err) = operator(served, &args);
    assert_eq!(code, 0, "postern {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `postern audit verify --store` of the gateway's ledger exits 0 (VALID).
pub fn assert_store_verifies(dir: &Path, served: &Served) {
    let public = public_key_file(dir);
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args([
            "audit",
            "verify",
            "--store",
            &served.store(),
            "--public-key",
        ])
        .arg(&public)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("VALID"), "{report}");
}

/// A real invoice API and a `postern serve` in front of it, with operator alice's token file in
/// place (the config `make` writes for the API's URL declares her, if it needs an operator).
pub struct Setup {
    pub target: postern_demo::target::InvoiceApiHandle,
    pub dir: Dir,
    pub served: Served,
}

impl Setup {
    pub async fn start(tag: &str, make: impl FnOnce(&str) -> String) -> Setup {
        let target = postern_demo::target::InvoiceApi::start().await.unwrap();
        let dir = Dir::new(tag);
        write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
        let served = Served::start(&dir.0, &make(&format!("http://{}", target.addr)));
        Setup {
            target,
            dir,
            served,
        }
    }
}

//! Issue 16 end to end: ssh tools against a real OpenSSH sshd on a loopback port (its own
//! host key and authorized key, from `postern_testkit::sshd`), through a proxy that can cut
//! the connection, behind a real `postern serve`. Each command appends the agent's line to a
//! file on the "host", so every test can say how many times it ran.

use std::path::{Path, PathBuf};
use std::time::Duration;

use postern_testkit::sshd::{keygen, CutProxy, Sshd};
use serde_json::{json, Value};

use crate::harness::{execution, execution_id, Dir, Mcp, Served, BILLING_TOKEN};

struct Host {
    sshd: Sshd,
    proxy: CutProxy,
    out: PathBuf,
    markers: PathBuf,
}

impl Host {
    async fn start(dir: &Path) -> Host {
        let sshd = Sshd::start(dir);
        let proxy = CutProxy::start(sshd.port).await;
        Host {
            out: dir.join("out.txt"),
            markers: dir.join("markers"),
            sshd,
            proxy,
        }
    }

    /// The lines the commands appended.
    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn config(&self, host_key: &str) -> String {
        format!(
            r#"
[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}
attach_wait = "10s"

[[actor]]
name = "billing"
token = {{ file = "billing.token" }}

[credential.deploy]
kind = "ssh_key"
secret = {{ file = {key:?} }}

[[tool]]
name = "append"
description = "Append a line on the host"
class = "remote_command"
match_window = "10m"
input_schema = {{ type = "object", required = ["line"], properties = {{ line = {{ type = "string" }}, delay = {{ type = "string" }} }} }}
defaults = {{ delay = "0" }}
ssh = {{ host = "127.0.0.1", port = {port}, user = {user:?}, host_key = {host_key:?}, credential = "deploy", cwd = {cwd:?}, marker_dir = {markers:?}, timeout = "20s", command = '''sleep {{delay}}; printf '%s\n' {{line}} >> out.txt; echo appended {{line}}''' }}

[[tool]]
name = "login"
description = "Log in with a token on the host"
class = "remote_command"
match_window = "10m"
secret_fields = ["token"]
input_schema = {{ type = "object", required = ["token"], properties = {{ token = {{ type = "string" }} }} }}
ssh = {{ host = "127.0.0.1", port = {port}, user = {user:?}, host_key = {host_key:?}, credential = "deploy", cwd = {cwd:?}, marker_dir = {markers:?}, command = '''echo tok >> out.txt; echo logged in with {{token}}''' }}
"#,
            key = self.sshd.client_key.to_str().unwrap(),
            port = self.proxy.port,
            user = self.sshd.user,
            cwd = self.out.parent().unwrap().to_str().unwrap(),
            markers = self.markers.to_str().unwrap(),
        )
    }
}

async fn setup(tag: &str) -> (Dir, Host, Served) {
    let dir = Dir::new(tag);
    let host = Host::start(&dir.0).await;
    let config = host.config(&host.sshd.host_key);
    let served = Served::start(&dir.0, &config);
    (dir, host, served)
}

/// Calls `append` with `args` and cuts the SSH connection `after_ms` into the call.
async fn call_then_cut(served: &Served, host: &Host, args: &Value, after_ms: u64) -> Value {
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let call = mcp.call("append", args.clone(), json!({}));
    tokio::pin!(call);
    tokio::select! {
        resp = &mut call => panic!("answered before the cut: {resp}"),
        () = tokio::time::sleep(Duration::from_millis(after_ms)) => host.proxy.cut(),
    }
    call.await
}

fn stdout_of(resp: &Value) -> String {
    let r = &resp["result"]["structuredContent"]["response"];
    r["stdout"].as_str().unwrap_or_default().to_string()
}

/// Runs once; its stdout and exit code are the result; the marker shows it finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_command_runs_once_under_its_marker() {
    let (_dir, host, served) = setup("ssh-once").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let resp = mcp.call("append", json!({"line": "one"}), json!({})).await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    assert_eq!(stdout_of(&resp), "appended one\n", "{resp}");
    assert_eq!(
        resp["result"]["structuredContent"]["response"]["exit_code"],
        0
    );
    assert_eq!(host.lines(), ["one"]);
    let id = execution_id(&resp);
    let marker = host.markers.join(&id);
    let finished = std::fs::read_to_string(marker.join("finished")).unwrap();
    assert!(finished.starts_with("0 "), "{finished}");
    assert!(marker.join("intent").exists() && marker.join("started").exists());
    assert!(
        !marker.join("command").exists(),
        "the command file is removed once it ends"
    );
    // The identical retry is answered from the record; nothing runs again.
    let again = mcp.call("append", json!({"line": "one"}), json!({})).await;
    assert_eq!(execution_id(&again), id);
    assert_eq!(host.lines(), ["one"]);
    // Another command goes over the same kept connection.
    let two = mcp.call("append", json!({"line": "two"}), json!({})).await;
    assert_eq!(execution(&two)["state"], "completed", "{two}");
    assert_eq!(host.lines(), ["one", "two"]);
    assert_eq!(
        *host.proxy.connections.lock().unwrap(),
        1,
        "one connection, kept"
    );
    // The record: channel ssh, target user@host:port, the rendered command.
    let shown = crate::harness::activity(&_dir.0, &["show", &id]);
    assert_eq!(shown["record"]["channel"], "ssh", "{shown}");
    let target = format!("{}@127.0.0.1:{}", host.sshd.user, host.proxy.port);
    assert_eq!(shown["record"]["target"], target.as_str(), "{shown}");
    let dispatched = &shown["events"][2]["detail"];
    assert!(
        dispatched["command"].as_str().unwrap().contains("'one'"),
        "{shown}"
    );
}

/// The connection is cut after the command started and before it ended: unknown; the retry
/// reads the marker (finished by then) and returns the stored result; it ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_is_resolved_by_the_marker() {
    let (_dir, host, served) = setup("ssh-cut").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let args = json!({"line": "cut", "delay": "1.5"});
    let first = call_then_cut(&served, &host, &args, 700).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    // The command runs on (1.5 s from its start); a loaded machine may take longer, so wait
    // for its line rather than a fixed time.
    let ran = std::time::Instant::now();
    while host.lines().is_empty() && ran.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        host.lines(),
        ["cut"],
        "the command kept running on the host"
    );
    let retry = mcp.call("append", args, json!({})).await;
    assert_eq!(execution(&retry)["state"], "completed", "{retry}");
    assert_eq!(execution(&retry)["attempt"], "recovered", "{retry}");
    assert_eq!(execution_id(&retry), execution_id(&first));
    assert_eq!(stdout_of(&retry), "appended cut\n");
    assert_eq!(host.lines(), ["cut"]);
}

/// Issue 33 point 9: the `dispatched` event names the marker directory as an absolute path,
/// and recovery reads that one. The tool's `marker_dir` changed across a restart used to make
/// the query say "none" in the new directory, and the command ran a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_reads_the_marker_directory_the_record_names() {
    let (dir, host, served) = setup("ssh-moved").await;
    let args = json!({"line": "moved", "delay": "1.5"});
    let first = call_then_cut(&served, &host, &args, 700).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let id = execution_id(&first);
    let shown = crate::harness::activity(&dir.0, &["show", &id]);
    let markers = std::fs::canonicalize(&host.markers).unwrap();
    assert_eq!(
        shown["events"][2]["detail"]["marker_dir"],
        markers.to_str().unwrap(),
        "{shown}"
    );
    served.kill9();
    // The command runs on after the gateway is gone (1.5 s from its start); a loaded machine
    // may take longer, so wait for its line rather than a fixed time.
    let ran = std::time::Instant::now();
    while host.lines().is_empty() && ran.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(host.lines(), ["moved"]);
    let elsewhere = dir.0.join("markers-elsewhere");
    let text = host.config(&host.sshd.host_key).replace(
        &format!("marker_dir = {:?}", host.markers.to_str().unwrap()),
        &format!("marker_dir = {:?}", elsewhere.to_str().unwrap()),
    );
    assert!(text.contains("markers-elsewhere"));
    std::fs::write(dir.0.join("postern.toml"), text).unwrap();
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let retry = mcp.call("append", args, json!({})).await;
    assert_eq!(execution(&retry)["state"], "completed", "{retry}");
    assert_eq!(execution(&retry)["attempt"], "recovered", "{retry}");
    assert_eq!(stdout_of(&retry), "appended moved\n");
    assert_eq!(host.lines(), ["moved"], "it ran once");
    // The recorded directory made unreadable: unknown, never "none" and a second run.
    let cut = json!({"line": "hidden", "delay": "1.5"});
    let first = call_then_cut(&served, &host, &cut, 700).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let recorded = std::fs::canonicalize(&elsewhere).unwrap();
    let hidden = dir.0.join("markers-hidden");
    std::fs::rename(&recorded, &hidden).unwrap();
    let retry = mcp.call("append", cut.clone(), json!({})).await;
    assert_eq!(execution(&retry)["state"], "outcome_unknown", "{retry}");
    assert_eq!(host.lines(), ["moved", "hidden"], "not run again");
    std::fs::rename(&hidden, &recorded).unwrap();
    let retry = mcp.call("append", cut, json!({})).await;
    assert_eq!(execution(&retry)["state"], "completed", "{retry}");
    assert_eq!(host.lines(), ["moved", "hidden"]);
}

/// The same with the command still running at the retry: attached, then the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_attaches_to_a_command_still_running() {
    let (_dir, host, served) = setup("ssh-attach").await;
    let args = json!({"line": "slow", "delay": "3"});
    let first = call_then_cut(&served, &host, &args, 600).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    assert!(host.lines().is_empty(), "still sleeping");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let retry = mcp.call("append", args, json!({})).await;
    assert_eq!(execution(&retry)["state"], "completed", "{retry}");
    assert_eq!(stdout_of(&retry), "appended slow\n");
    assert_eq!(host.lines(), ["slow"]);
}

/// The gateway is killed mid-command: after the restart the record says unknown, and the
/// identical call resolves it from the marker; never a second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_killed_mid_command_recovers_from_the_marker() {
    let (dir, host, served) = setup("ssh-kill").await;
    let args = json!({"line": "killed", "delay": "1.5"});
    let url = served.url.clone();
    let pending = tokio::spawn({
        let args = args.clone();
        async move {
            let mcp = Mcp::connect(&url, BILLING_TOKEN).await;
            mcp.call("append", args, json!({})).await
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    served.kill9();
    let _ = pending.await;
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let retry = mcp.call("append", args, json!({})).await;
    assert_eq!(execution(&retry)["state"], "completed", "{retry}");
    assert_eq!(execution(&retry)["attempt"], "recovered", "{retry}");
    assert_eq!(host.lines(), ["killed"]);
    crate::harness::assert_store_verifies(&dir.0, &served);
}

/// Quotes, substitutions, separators, newlines and globs in an argument are data: each line
/// is appended as written and the canary is never created. A NUL is refused before anything
/// is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_never_become_commands() {
    let (dir, host, served) = setup("ssh-inject").await;
    let canary = dir.0.join("CANARY");
    let c = canary.to_str().unwrap();
    let attempts = [
        format!("$(touch {c})"),
        format!("`touch {c}`"),
        format!("; touch {c}"),
        format!("x' ; touch {c} ; echo '"),
        format!("a\ntouch {c}"),
        format!("| touch {c}"),
        format!("&& touch {c}"),
        format!("> {c}"),
        "*".to_string(),
        "-n".to_string(),
        "${HOME}".to_string(),
    ];
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    for line in &attempts {
        let resp = mcp.call("append", json!({"line": line}), json!({})).await;
        assert_eq!(execution(&resp)["state"], "completed", "{line:?}: {resp}");
    }
    assert!(!canary.exists(), "an argument ran a command");
    let expected: Vec<String> = attempts
        .iter()
        .flat_map(|l| l.lines().map(str::to_string))
        .collect();
    assert_eq!(host.lines(), expected);
    let nul = mcp
        .call("append", json!({"line": "a\u{0}b"}), json!({}))
        .await;
    assert!(nul.to_string().contains("NUL"), "{nul}");
    assert_eq!(host.lines().len(), expected.len());
}

/// A secret argument the command prints comes back (and is stored) redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_command_prints_is_redacted() {
    let (dir, host, served) = setup("ssh-secret").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let token = "s3cr3t-token-value-0123";
    let resp = mcp.call("login", json!({"token": token}), json!({})).await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    assert!(!resp.to_string().contains(token), "{resp}");
    assert!(stdout_of(&resp).contains("[REDACTED]"), "{resp}");
    let shown = crate::harness::activity(&dir.0, &["show", &execution_id(&resp)]);
    assert!(!shown.to_string().contains(token), "{shown}");
    assert_eq!(host.lines(), ["tok"]);
}

/// A host whose key is not the pinned one is refused before any command; nothing runs, and the
/// refusal is in the record. A wrong port and a refused key fail, naming the user and host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_host_key_or_no_way_in_is_failed_with_nothing_run() {
    let dir = Dir::new("ssh-hostkey");
    let host = Host::start(&dir.0).await;
    let other = keygen(&dir.0.join("other_host"), "ed25519");
    let served = Served::start(&dir.0, &host.config(&other));
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let resp = mcp
        .call("append", json!({"line": "never"}), json!({}))
        .await;
    assert_eq!(execution(&resp)["state"], "failed", "{resp}");
    assert!(resp.to_string().contains("not the pinned one"), "{resp}");
    assert!(host.lines().is_empty());
    assert!(!host.markers.exists(), "not even a marker");
    let shown = crate::harness::activity(&dir.0, &["show", &execution_id(&resp)]);
    assert!(shown.to_string().contains("not the pinned one"), "{shown}");
    served.stop();

    // The pin given as a SHA256 fingerprint works the same way (here: the right one).
    let fp = std::process::Command::new("ssh-keygen")
        .args(["-lf"])
        .arg(dir.0.join("sshd/host_ed25519.pub"))
        .output()
        .unwrap();
    let fp = String::from_utf8_lossy(&fp.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    assert!(fp.starts_with("SHA256:"), "{fp}");
    std::fs::write(dir.0.join("postern.toml"), host.config(&fp)).unwrap();
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let resp = mcp
        .call("append", json!({"line": "pinned"}), json!({}))
        .await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    served.stop();

    // A key the server does not accept.
    let stranger = dir.0.join("stranger");
    keygen(&stranger, "ed25519");
    let text = host.config(&host.sshd.host_key).replace(
        host.sshd.client_key.to_str().unwrap(),
        stranger.to_str().unwrap(),
    );
    std::fs::write(dir.0.join("postern.toml"), text).unwrap();
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let resp = mcp
        .call("append", json!({"line": "refused"}), json!({}))
        .await;
    assert_eq!(execution(&resp)["state"], "failed", "{resp}");
    let text = resp.to_string();
    assert!(
        text.contains("refused the key") && text.contains(&host.sshd.user),
        "{resp}"
    );
    assert!(!text.contains("OPENSSH PRIVATE KEY"), "{resp}");
    assert_eq!(host.lines(), ["pinned"]);
    served.stop();

    // A host nobody listens on: failed, naming it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let text = host.config(&host.sshd.host_key).replace(
        &format!("port = {}", host.proxy.port),
        &format!("port = {port}"),
    );
    std::fs::write(dir.0.join("postern.toml"), text).unwrap();
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let resp = mcp
        .call("append", json!({"line": "nowhere"}), json!({}))
        .await;
    assert_eq!(execution(&resp)["state"], "failed", "{resp}");
    assert!(
        resp.to_string().contains(&format!("127.0.0.1:{port}")),
        "{resp}"
    );
    assert_eq!(host.lines(), ["pinned"]);
}

/// A tool whose template hands `{n}` (of JSON type `n_type`) to `bash -c`, which evaluates it
/// as arithmetic: issue 49, point 7.
fn compare_tool(host: &Host, n_type: &str) -> String {
    format!(
        r#"
[[tool]]
name = "compare"
description = "Say whether n is above 3"
class = "remote_command"
match_window = "10m"
input_schema = {{ type = "object", required = ["n"], properties = {{ n = {{ type = "{n_type}" }} }} }}
ssh = {{ host = "127.0.0.1", port = {port}, user = {user:?}, host_key = {host_key:?}, credential = "deploy", cwd = {cwd:?}, marker_dir = {markers:?}, command = '''bash -c '(( $1 > 3 )) && echo big || echo small' _ {{n}}''' }}
"#,
        port = host.proxy.port,
        user = host.sshd.user,
        host_key = host.sshd.host_key,
        cwd = host.out.parent().unwrap().to_str().unwrap(),
        markers = host.markers.to_str().unwrap(),
    )
}

/// `postern serve` on the config in `dir`: `Err(stderr)` if it refused to start, or the
/// `Child` and its MCP URL if it serves.
fn serve_or_refusal(dir: &Path) -> Result<(std::process::Child, String), String> {
    use std::io::{BufRead, Read};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["serve", "-c", dir.join("postern.toml").to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    match line.trim().strip_prefix("postern listening on ") {
        Some(url) => Ok((child, url.to_string())),
        None => {
            let status = child.wait().unwrap();
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            assert_eq!(status.code(), Some(2), "{stderr}");
            Err(stderr)
        }
    }
}

/// Issue 49, point 7: `bash -c '(( $1 > 3 ))' _ {n}` with `n = a[$(touch …)]` created the file
/// on the host (bash expands the subscript when it evaluates the arithmetic). The gateway now
/// refuses that template at start-up unless `n` is typed; typed `integer`, the attack is an
/// invalid argument and the tool works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_bash_evaluates_is_refused_at_start_up_unless_typed() {
    let dir = Dir::new("ssh-reread");
    let host = Host::start(&dir.0).await;
    let canary = dir.0.join("PWN");
    let attack = json!({"n": format!("a[$(touch {})]", canary.display())});
    let config = host.config(&host.sshd.host_key);
    crate::harness::prepare(
        &dir.0,
        &format!("{config}{}", compare_tool(&host, "string")),
    );
    match serve_or_refusal(&dir.0) {
        Err(stderr) => assert!(
            stderr.contains("compare")
                && stderr.contains("{n}")
                && stderr.contains("runs bash")
                && stderr.contains("integer"),
            "{stderr}"
        ),
        Ok((mut child, url)) => {
            // The old gateway: the attack reaches the host.
            let mcp = Mcp::connect(&url, BILLING_TOKEN).await;
            let resp = mcp.call("compare", attack.clone(), json!({})).await;
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the gateway served the template; the host file exists: {}; {resp}",
                canary.exists()
            );
        }
    }
    assert!(!canary.exists());

    std::fs::write(
        dir.0.join("postern.toml"),
        format!("{config}{}", compare_tool(&host, "integer")),
    )
    .unwrap();
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let refused = mcp.call("compare", attack, json!({})).await;
    let why = &refused["result"]["_meta"]["io.postern/refused"];
    assert_eq!(why["reason"], "invalid_arguments", "{refused}");
    assert_eq!(
        (&why["recorded"], &why["sent"]),
        (&json!(false), &json!(false))
    );
    let resp = mcp.call("compare", json!({"n": 5}), json!({})).await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    assert_eq!(stdout_of(&resp), "big\n", "{resp}");
    assert!(!canary.exists(), "the attack never ran");
    served.stop();
}

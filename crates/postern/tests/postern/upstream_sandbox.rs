//! Issue 47, upstreams cannot read the gateway: a hostile stdio upstream
//! (`tests/interop/hostile_upstream.py`, standard library only) started by a real `postern
//! serve` whose environment holds an agent's token, an operator's token and a credential's
//! secret, tries on a tool call to read the gateway's `/proc` entries (environ, maps, mem, its
//! open files), to attach to it with ptrace, to signal it, and to read its keys, config and
//! store — with the gateway as root (the upstream then runs as `nobody`) and as an unprivileged
//! user (the upstream shares its uid). Every attempt is refused and nothing of the gateway comes
//! back. Beside it: a sandboxed upstream writes only inside `sandbox.write`; `sandbox = "off"`
//! is said at start-up; an entry that holds a protected path is a start-up error.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use postern_testkit::unprivileged::{give_to_nobody, reachable, running_as_root, NOBODY};
use serde_json::{json, Value};

use crate::foreign::repo_root;
use crate::harness::{prepare, serve_refuses_with_env, Dir, Mcp, Served, BILLING_TOKEN};
use crate::upstream::wait_available;
use crate::upstream_env::{env_gateway, GATEWAY_SECRETS};

/// The contents of the key files `prepare` writes.
const KEYS: [&str; 2] = [
    "7f3a1e0b6a2d4f5e7c9b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f",
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
];

/// The gateway's config: its secrets by environment and files, the hostile upstream (run by
/// the system's python3, which any user may run) given the paths to try, and `sandbox` as
/// `sandbox_toml` says (`""`: the default, the script's directory readable).
fn config(targets: &[PathBuf], sandbox_toml: &str) -> String {
    let script = repo_root().join("tests/interop/hostile_upstream.py");
    let mut command = vec!["/usr/bin/python3".to_string(), script.display().to_string()];
    command.extend(targets.iter().map(|t| t.display().to_string()));
    let sandbox = match sandbox_toml {
        "" => format!(
            "\n[upstream.h.sandbox]\nread = [{:?}]\n",
            script.parent().unwrap()
        ),
        own => own.to_string(),
    };
    format!(
        r#"{gateway}
[upstream.h]
command = {command:?}
expose = "all"
default_class = "read_only"
{sandbox}"#,
        gateway = env_gateway("h_*"),
    )
}

/// The files and directory of the gateway in `dir` the upstream is told to try.
fn gateway_files(dir: &Path) -> Vec<PathBuf> {
    [
        "fp.key",
        "signing.key",
        "billing.token",
        "postern.toml",
        "ledger.db",
    ]
    .iter()
    .map(|f| dir.join(f))
    .chain([dir.to_path_buf()])
    .collect()
}

/// Calls the hostile upstream's `probe` (writing `write`); what each attempt got.
async fn probe(served: &Served, write: &[PathBuf]) -> (Vec<Value>, String) {
    wait_available(&served.url, "h_probe").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let response = mcp
        .call("h_probe", json!({"write": write}), json!({}))
        .await;
    let whole = response.to_string();
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no probe result in {response}"));
    (serde_json::from_str(text).unwrap(), whole)
}

/// Every attempt on the gateway was refused (EACCES or EPERM), each kind was made, and no
/// secret, key, config or store byte is anywhere in the answer.
fn assert_got_nothing(dir: &Path, tries: &[Value], whole: &str) {
    let names: Vec<&str> = tries.iter().map(|t| t["what"].as_str().unwrap()).collect();
    for kind in [
        "environ",
        "maps",
        "mem",
        "fd list",
        "ptrace attach",
        "signal",
    ] {
        assert!(names.contains(&kind), "{kind} was not tried: {names:?}");
    }
    for file in gateway_files(dir) {
        assert!(
            names.iter().any(|n| n.ends_with(&*file.to_string_lossy())),
            "{} was not tried: {names:?}",
            file.display()
        );
    }
    for attempt in tries {
        assert_eq!(attempt["ok"], false, "the upstream got it: {attempt}");
        let error = attempt["error"].as_str().unwrap();
        assert!(
            error == "EACCES" || error == "EPERM",
            "not refused for want of permission: {attempt}"
        );
    }
    let config = std::fs::read_to_string(dir.join("postern.toml")).unwrap();
    let secrets = GATEWAY_SECRETS.iter().map(|(_, v)| *v).chain(KEYS).chain([
        "SQLite format 3",
        config.lines().find(|l| l.contains("BANK_TOKEN")).unwrap(),
    ]);
    for secret in secrets {
        assert!(
            !whole.contains(secret),
            "{secret:?} reached the agent: {whole}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_upstream_gets_nothing_of_a_gateway_running_as_root() {
    assert!(
        running_as_root(),
        "this test starts the gateway as root (as the CI runs the tests): run it as root"
    );
    let dir = Dir::new("sandbox-root");
    prepare(&dir.0, &config(&gateway_files(&dir.0), ""));
    let served = Served::spawn_with_env(&dir.0, "127.0.0.1:0", &GATEWAY_SECRETS);
    let (tries, whole) = probe(&served, &[]).await;
    assert_got_nothing(&dir.0, &tries, &whole);
    served.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_upstream_gets_nothing_of_a_gateway_running_as_an_unprivileged_user() {
    let dir = Dir::new("sandbox-user");
    prepare(&dir.0, &config(&gateway_files(&dir.0), ""));
    // As root, the gateway is started as `nobody` from a copy it may execute (the build's
    // directory is root's), in a directory that is its own; else as the test's own user.
    let mut command = match running_as_root() {
        true => {
            give_to_nobody(&dir.0);
            let mut command = Command::new(reachable(Path::new(env!("CARGO_BIN_EXE_postern"))));
            std::os::unix::process::CommandExt::uid(&mut command, NOBODY);
            std::os::unix::process::CommandExt::gid(&mut command, NOBODY);
            command
        }
        false => Command::new(env!("CARGO_BIN_EXE_postern")),
    };
    command.envs(GATEWAY_SECRETS).current_dir(&dir.0);
    let served = Served::spawn_command(&dir.0, "127.0.0.1:0", command);
    if running_as_root() {
        let status = std::fs::read_to_string(format!("/proc/{}/status", served.pid())).unwrap();
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(
            uid.contains(&NOBODY.to_string()),
            "the gateway runs as {uid}"
        );
    }
    let (tries, whole) = probe(&served, &[]).await;
    assert_got_nothing(&dir.0, &tries, &whole);
    served.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_upstream_writes_inside_sandbox_write_and_nowhere_else() {
    let dir = Dir::new("sandbox-write");
    let files = Dir::new("sandbox-write-files");
    let elsewhere = Dir::new("sandbox-write-elsewhere");
    // The upstream's user may write both (as root: they are nobody's): only its sandbox
    // tells them apart.
    give_to_nobody(&files.0);
    give_to_nobody(&elsewhere.0);
    let script_dir = repo_root().join("tests/interop");
    let sandbox = format!(
        "\n[upstream.h.sandbox]\nread = [{script_dir:?}]\nwrite = [{:?}]\n",
        files.0
    );
    prepare(&dir.0, &config(&[], &sandbox));
    let served = Served::spawn_with_env(&dir.0, "127.0.0.1:0", &GATEWAY_SECRETS);
    let inside = files.0.join("inside.txt");
    let outside = elsewhere.0.join("outside.txt");
    let planted = dir.0.join("planted.toml");
    let (tries, _) = probe(&served, &[inside.clone(), outside.clone(), planted.clone()]).await;
    let attempt = |path: &Path| {
        tries
            .iter()
            .find(|t| t["what"] == format!("write {}", path.display()))
            .unwrap_or_else(|| panic!("{} not tried: {tries:?}", path.display()))
            .clone()
    };
    assert_eq!(attempt(&inside)["ok"], true, "{tries:?}");
    assert!(std::fs::read_to_string(&inside)
        .unwrap()
        .contains("hostile upstream"));
    for path in [&outside, &planted] {
        assert_eq!(attempt(path)["error"], "EACCES", "{tries:?}");
        assert!(!path.exists(), "{} was written", path.display());
    }
    served.stop();
}

#[test]
fn sandbox_off_is_said_at_start_up() {
    let dir = Dir::new("sandbox-off");
    prepare(&dir.0, &config(&[], "sandbox = \"off\"\n"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_postern"))
        .envs(GATEWAY_SECRETS)
        .args(["serve", "-c", dir.0.join("postern.toml").to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read on a thread of its own: a gateway that says nothing must not hold the test.
    let stderr = child.stderr.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut said = Vec::new();
    while let Ok(line) = seen.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if line.contains("upstream h runs unsandboxed (sandbox = \"off\")") {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        said.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the gateway said nothing of the unsandboxed upstream: {said:#?}");
}

#[test]
fn an_entry_that_holds_a_protected_path_is_a_start_up_error() {
    let outside = Dir::new("sandbox-protected-parent");
    let dir = outside.0.join("gateway");
    std::fs::create_dir_all(&dir).unwrap();
    for (entry, what) in [
        ("read = [\".\"]", "is the gateway's config directory"),
        ("read = [\"fp.key\"]", "is the fingerprint key"),
        ("write = [\"..\"]", "holds the gateway's config directory"),
    ] {
        let _ = std::fs::remove_file(dir.join("postern.toml"));
        prepare(
            &dir,
            &config(&[], &format!("\n[upstream.h.sandbox]\n{entry}\n")),
        );
        let stderr = serve_refuses_with_env(&dir, &GATEWAY_SECRETS);
        let key = entry.split(' ').next().unwrap();
        assert!(
            stderr.contains(&format!("upstream.h: sandbox.{key}: ")) && stderr.contains(what),
            "{entry}: {stderr}"
        );
    }
}

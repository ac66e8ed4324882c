//! A newcomer's first hour: `postern init` writes the one starter config (`examples/postern.toml`),
//! and `postern serve` starts on it with only the environment variables the file names. A
//! configuration that promises what this build does not do is refused at start-up.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use postern_core::config::Config;
use postern_core::ActionClass;
use serde_json::json;

use crate::harness::{sse_message, Dir, Mcp};

const AGENT_TOKEN: &str = "agent-token-0123456789abcdef";

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/postern.toml")
}

fn postern() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_postern"));
    // Only what a newcomer's shell would have: no variable of this test run leaks in.
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    c
}

fn init(dir: &Path) {
    let out = postern()
        .args(["init", "--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("audit public key: "), "{stdout}");
}

#[test]
fn the_example_is_what_init_writes_and_it_parses() {
    let dir = Dir::new("init-example");
    init(&dir.0);
    let written = std::fs::read_to_string(dir.0.join("postern.toml")).unwrap();
    let example = std::fs::read_to_string(example()).unwrap();
    assert_eq!(written, example, "init writes examples/postern.toml");
    let config = Config::parse(&example, "examples/postern.toml").unwrap();
    assert!(
        config.gateway.signing_key.is_some(),
        "checkpoints are signed"
    );
    let create = config.tool("create_invoice").unwrap();
    assert_eq!(create.class, ActionClass::IdempotentWrite);
    assert!(create.recovery.status_query.is_some());
    assert_eq!(
        config.tool("list_invoices").unwrap().class,
        ActionClass::ReadOnly
    );
    // The keys are private.
    use std::os::unix::fs::PermissionsExt;
    for key in ["postern.fingerprint.key", "postern.signing.key"] {
        let mode = std::fs::metadata(dir.0.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    // Every environment variable the config references is named in its header.
    let header: String = example.lines().take_while(|l| l.starts_with('#')).collect();
    for line in example.lines().filter(|l| !l.starts_with('#')) {
        if let Some((_, rest)) = line.split_once("env = \"") {
            let name = rest.split('"').next().unwrap();
            assert!(header.contains(name), "{name} is not named in the header");
        }
    }
    // A second init never overwrites.
    let again = postern()
        .args(["init", "--dir", dir.0.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_then_serve_works_with_only_the_variables_the_file_names() {
    let dir = Dir::new("init-serve");
    init(&dir.0);
    let config = dir.0.join("postern.toml");
    let mut child = postern()
        .args([
            "serve",
            "-c",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("BILLING_AGENT_TOKEN", AGENT_TOKEN)
        .env("INVOICES_API_TOKEN", "invoices-secret")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let url = crate::harness::listening_url(&mut child);
    let mcp = Mcp::connect(&url, AGENT_TOKEN).await;
    let (status, body) = mcp
        .raw(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
            None,
        )
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "{body}");
    let listed = sse_message(&body);
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"create_invoice"), "{names:?}");
    assert!(names.contains(&"list_invoices"), "{names:?}");
}

#[test]
fn serve_names_a_missing_variable() {
    let dir = Dir::new("init-missing");
    init(&dir.0);
    let out = postern()
        .args(["serve", "-c", dir.0.join("postern.toml").to_str().unwrap()])
        .env("BILLING_AGENT_TOKEN", AGENT_TOKEN)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("INVOICES_API_TOKEN"), "{stderr}");
}

/// A key the gateway would parse and then ignore (an approval nobody is asked for, a channel
/// never dialled) is a start-up error, not a silent promise.
#[test]
fn a_promise_this_build_does_not_keep_is_refused_at_start_up() {
    let example = std::fs::read_to_string(example()).unwrap();
    let cases = [
        (
            example.replace(
                "class = \"read_only\"",
                "class = \"read_only\"\napproval = \"every_call\"",
            ),
            "tool \"list_invoices\": approval = \"every_call\"",
        ),
        (
            example.replace(
                "kind = \"bearer\"",
                "kind = \"bearer\"\napproval = \"every_call\"",
            ),
            "credential \"invoices-api\": approval = \"every_call\"",
        ),
        (
            example.replace(
                "name = \"billing-agent\"",
                "name = \"billing-agent\"\nsession_approval = \"required\"",
            ),
            "session_approval = \"required\"",
        ),
        (
            format!(
                "{example}\n[upstream.books]\ncommand = [\"books-mcp\"]\nexpose = \"all\"\napproval = \"every_call\"\n"
            ),
            "upstream \"books\": approval = \"every_call\"",
        ),
    ];
    for (text, expected) in cases {
        let dir = Dir::new("unkept");
        init(&dir.0);
        std::fs::write(dir.0.join("postern.toml"), &text).unwrap();
        let out = postern()
            .args(["serve", "-c", dir.0.join("postern.toml").to_str().unwrap()])
            .env("BILLING_AGENT_TOKEN", AGENT_TOKEN)
            .env("INVOICES_API_TOKEN", "invoices-secret")
            .env("DEPLOY_KEY", "not-a-key")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted: {expected}");
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
        assert!(stderr.contains("no [[operator]] is declared"), "{stderr}");
    }
}

/// Issue 12: a secret file others can read is refused at start-up, naming the file and the fix
/// (as ssh refuses such a private key); nothing of its content is printed.
#[test]
fn a_secret_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("init-perms");
    init(&dir.0);
    let key = dir.0.join("postern.fingerprint.key");
    let text = std::fs::read_to_string(&key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = postern()
        .args(["serve", "-c", dir.0.join("postern.toml").to_str().unwrap()])
        .env("BILLING_AGENT_TOKEN", AGENT_TOKEN)
        .env("INVOICES_API_TOKEN", "invoices-secret")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("is readable by others (mode 644)"),
        "{stderr}"
    );
    assert!(stderr.contains("chmod 600"), "{stderr}");
    assert!(!stderr.contains(text.trim()), "{stderr}");
}

/// Issue 12: the store holds every call's arguments and answers. `postern serve` creates it
/// readable by its owner only (its WAL follows), and refuses one others can read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_private_and_a_shared_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let target = postern_demo::target::InvoiceApi::start().await.unwrap();
    let dir = crate::harness::Dir::new("store-perms");
    let served = crate::harness::Served::start(&dir.0, &crate::harness::config(&target.url("")));
    let mcp = crate::harness::Mcp::connect(&served.url, crate::harness::BILLING_TOKEN).await;
    mcp.call(
        "create_invoice",
        serde_json::json!({"customer": "perm", "amount": 1}),
        serde_json::json!({}),
    )
    .await;
    let mode = |name: &str| {
        std::fs::metadata(dir.0.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("ledger.db"), 0o600);
    assert_eq!(mode("ledger.db-wal"), 0o600);
    served.stop();

    let db = dir.0.join("ledger.db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = postern()
        .args(["serve", "-c", dir.0.join("postern.toml").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "the store {} is readable by others (mode 644): run chmod 600",
            db.display()
        )),
        "{stderr}"
    );
}

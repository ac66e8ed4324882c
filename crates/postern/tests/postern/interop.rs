//! A foreign client: the official Python MCP SDK (`tests/interop/python_sdk.py`, pinned in
//! `tests/interop/requirements.txt`) lists the tools and calls one against a real
//! `postern serve` in front of the real invoice API, in both of the SDK's connection modes: the
//! legacy `initialize` handshake and the stateless MCP 2026-07-28 protocol.

use std::path::PathBuf;
use std::process::{Command, Output};

use postern_demo::target::InvoiceApi;

use crate::foreign::{output, repo_root};
use crate::harness::{config, Dir, Served, BILLING_TOKEN};

const INSTALL: &str = "install the interop client: pip install -r tests/interop/requirements.txt \
                       (or bash tests/interop/install.sh)";

pub(crate) fn python3(args: &[&str]) -> Command {
    let mut c = Command::new("python3");
    c.args(args).current_dir(repo_root());
    c
}

/// The SDK must be installed: a missing client fails the test, it never skips it.
pub(crate) async fn require_sdk() {
    let what = "import mcp, importlib.metadata as m; print(m.version('mcp'))";
    match tokio::task::spawn_blocking(move || python3(&["-c", what]).output())
        .await
        .unwrap()
    {
        Ok(out) if out.status.success() => {
            let have = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let pins = std::fs::read_to_string(repo_root().join("tests/interop/requirements.txt"))
                .unwrap();
            assert!(
                pins.lines().any(|l| l.trim() == format!("mcp=={have}")),
                "{INSTALL}\nmcp {have} is installed, the pin is {pins}"
            );
        }
        Ok(out) => panic!("{INSTALL}\n{}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("{INSTALL} (python3 could not be run: {e})"),
    }
}

/// How the SDK reaches the gateway.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Over {
    Http,
    /// `[gateway] tls` with a test CA the SDK is told to trust by `SSL_CERT_FILE`, as a user
    /// would tell any Python program.
    Tls,
}

async fn run_sdk(mode: &str, over: Over) {
    require_sdk().await;
    // The directory lives as long as the gateway that uses it.
    let (target, served, ca_file, _dir): (_, Served, Option<PathBuf>, Dir) = match over {
        Over::Http => {
            let target = InvoiceApi::start().await.unwrap();
            let dir = Dir::new(&format!("python-sdk-{mode}"));
            let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
            (target, served, None, dir)
        }
        Over::Tls => {
            let gw =
                crate::tls_listener::tls_gateway(&format!("python-sdk-tls-{mode}"), |t| t).await;
            (gw.target, gw.served, Some(gw.ca_file), gw.dir)
        }
    };
    assert_eq!(served.url.starts_with("https://"), over == Over::Tls);

    let script = repo_root().join("tests/interop/python_sdk.py");
    let mut command = python3(&[
        script.to_str().unwrap(),
        "--mode",
        mode,
        &served.url,
        BILLING_TOKEN,
    ]);
    command
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    if let Some(ca) = &ca_file {
        command.env("SSL_CERT_FILE", ca);
    }
    // The invoice API runs on this runtime: the client runs on a blocking thread beside it.
    let out: Output = output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python_sdk.py --mode {mode} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(stdout.contains("create_invoice"), "{stdout}");
    let protocol = if mode == "legacy" { "2025-11-25" } else { mode };
    assert!(
        stdout.contains(&format!("protocol {protocol}")),
        "not connected at {protocol}:\n{stdout}"
    );

    // Two calls with the same arguments: one invoice.
    let invoices: Vec<_> = target
        .state
        .invoices()
        .into_iter()
        .filter(|i| i.customer == "python-sdk")
        .collect();
    assert_eq!(invoices.len(), 1, "{invoices:?}\n{stdout}");
    assert_eq!(invoices[0].amount, 7);
    assert_eq!(target.state.count_for("python-sdk"), 1);
}

/// The `initialize` handshake (protocol 2025-11-25) and a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls() {
    run_sdk("legacy", Over::Http).await;
}

/// The same over TLS (issue 13): the SDK verifies the gateway's certificate against the CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls_over_tls() {
    run_sdk("legacy", Over::Tls).await;
}

/// `server/discover`, then stateless requests (protocol 2026-07-28).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls_at_2026_07_28() {
    run_sdk("2026-07-28", Over::Http).await;
}

/// The stateless protocol over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls_at_2026_07_28_over_tls() {
    run_sdk("2026-07-28", Over::Tls).await;
}

/// Issue 35: a careless Python SDK agent whose session is evicted at the session cap (1 here)
/// by its own second client gets the SDK's "Session terminated", initialises again and
/// continues: its identical call is answered from the record (`tests/interop/python_evicted.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_client_whose_session_was_evicted_initialises_again_and_continues() {
    require_sdk().await;
    let api = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("interop-evicted");
    let text = config(&format!("http://{}", api.addr))
        .replace("[gateway]\n", "[gateway]\nmax_sessions_per_actor = 1\n");
    let served = Served::start(&dir.0, &text);
    let script = repo_root().join("tests/interop/python_evicted.py");
    let out = output(python3(&[
        script.to_str().unwrap(),
        &served.url,
        BILLING_TOKEN,
    ]))
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python_evicted.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(api.state.count_for("careless-python"), 1, "{stdout}");
}

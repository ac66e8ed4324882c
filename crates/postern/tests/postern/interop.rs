//! A foreign client: the official Python MCP SDK (`tests/interop/python_sdk.py`, pinned in
//! `tests/interop/requirements.txt`) lists the tools and calls one against a real
//! `postern serve` in front of the real invoice API, in both of the SDK's connection modes: the
//! legacy `initialize` handshake and the stateless MCP 2026-07-28 protocol.

use std::process::{Command, Output};

use postern_gateway::demo_target::InvoiceApi;

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

async fn run_sdk(mode: &str) {
    require_sdk().await;
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new(&format!("python-sdk-{mode}"));
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));

    let script = repo_root().join("tests/interop/python_sdk.py");
    // The invoice API runs on this runtime: the client runs on a blocking thread beside it.
    let out: Output = output(python3(&[
        script.to_str().unwrap(),
        "--mode",
        mode,
        &served.url,
        BILLING_TOKEN,
    ]))
    .await;
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
    run_sdk("legacy").await;
}

/// `server/discover`, then stateless requests (protocol 2026-07-28).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls_at_2026_07_28() {
    run_sdk("2026-07-28").await;
}

//! A foreign client: the official Python MCP SDK (`tests/interop/python_sdk.py`, pinned in
//! `tests/interop/requirements.txt`) lists the tools and calls one against a real
//! `postern serve` in front of the real invoice API.

use std::path::PathBuf;
use std::process::{Command, Output};

use postern_gateway::demo_target::InvoiceApi;

use crate::harness::{config, Dir, Served, BILLING_TOKEN};

const INSTALL: &str = "install the interop client: pip install -r tests/interop/requirements.txt";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn python3(args: &[&str]) -> std::io::Result<Output> {
    Command::new("python3")
        .args(args)
        .current_dir(repo_root())
        .output()
}

/// The SDK must be installed: a missing client fails the test, it never skips it.
fn require_sdk() {
    match python3(&["-c", "import mcp"]) {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("{INSTALL}\n{}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("{INSTALL} (python3 could not be run: {e})"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_and_calls() {
    require_sdk();
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("python-sdk");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));

    let script = repo_root().join("tests/interop/python_sdk.py");
    let url = served.url.clone();
    // The invoice API runs on this runtime: the client runs on a blocking thread beside it.
    let out = tokio::task::spawn_blocking(move || {
        python3(&[script.to_str().unwrap(), &url, BILLING_TOKEN])
    })
    .await
    .unwrap()
    .expect("python3 could not be run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python_sdk.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(stdout.contains("create_invoice"), "{stdout}");

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

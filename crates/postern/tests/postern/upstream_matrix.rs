//! Issue 32, the capability matrix: server-everything (the npm reference server, pinned) is
//! reached by the official Python SDK three ways at once — directly, through `postern serve
//! --stdio`, and through `postern connect` in front of an HTTP `postern serve` — and every
//! capability's result through Postern must equal the direct one (Postern's own additions
//! taken off: its execution block, the `ev_` prefix). Two rows differ by design and must differ
//! exactly so: `roots` (an upstream asking outside a call gets no roots) and `list_changed`
//! (through Postern the list is whole before the client is served). docs/interop.md keeps the
//! table.

use serde_json::Value;

use crate::foreign::{output, repo_root, NodeClients};
use crate::harness::{prepare, Dir, Served, BILLING_TOKEN};
use crate::interop::{python3, require_sdk};
use crate::upstream::GATEWAY;

/// The rows whose columns must all be equal.
const SAME: &[&str] = &[
    "tools list (outputSchema, title)",
    "text result",
    "image result",
    "resource link",
    "structured content",
    "resources list/read",
    "resource templates",
    "prompts list/get",
    "completion",
    "resource subscribe/updates",
    "logging",
    "progress",
    "cancellation",
    "elicitation (form)",
    "elicitation (url)",
    "sampling",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_capability_through_postern_is_what_the_server_says_directly() {
    require_sdk().await;
    let node = NodeClients::require();
    let everything = node
        .package("@modelcontextprotocol/server-everything")
        .join("dist/index.js");
    let config = format!(
        r#"{GATEWAY}tools = ["ev_*"]

[upstream.ev]
command = [{node:?}, {everything:?}, "stdio"]
expose = "all"
default_class = "read_only"
"#,
        node = node.node_binary().to_str().unwrap(),
        everything = everything.to_str().unwrap(),
    );
    let stdio_dir = Dir::new("matrix-stdio");
    prepare(&stdio_dir.0, &config);
    let http_dir = Dir::new("matrix-http");
    let served = Served::start(&http_dir.0, &config);
    let script = repo_root().join("tests/interop/python_matrix.py");
    let mut command = python3(&[
        script.to_str().unwrap(),
        env!("CARGO_BIN_EXE_postern"),
        stdio_dir.0.join("postern.toml").to_str().unwrap(),
        node.node_binary().to_str().unwrap(),
        everything.to_str().unwrap(),
        &served.url,
    ]);
    command.env("POSTERN_TOKEN", BILLING_TOKEN);
    let out = output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python_matrix.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_str(stdout.trim()).unwrap();
    let row = |name: &str| -> &Value {
        rows.get(name)
            .unwrap_or_else(|| panic!("no row {name:?} in {rows}"))
    };
    for name in SAME {
        assert_eq!(
            row(name)["same"],
            true,
            "{name}: through Postern differs from the direct server:\n{:#}",
            row(name)
        );
    }
    // By design: an upstream that asks for roots outside a call (server-everything asks when
    // it starts) gets none through Postern; the direct client gives its own.
    let roots = row("roots");
    assert!(
        roots["direct"]
            .to_string()
            .contains("file:///tmp/matrix-root"),
        "{roots:#}"
    );
    for column in ["stdio", "connect"] {
        let text = roots[column].to_string();
        assert!(
            !text.contains("file:///tmp/matrix-root") && text.contains("no roots"),
            "{column}: {roots:#}"
        );
    }
    // Tools, prompts and resources exist in every column (list_changed: whole before served).
    assert_eq!(
        row("list_changed")["direct"]["tools list_changed seen"],
        true
    );
    served.stop();
}

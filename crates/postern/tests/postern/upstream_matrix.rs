//! Issue 32, the capability matrix: server-everything (the npm reference server, pinned) is
//! reached by the official Python SDK three ways at once — directly, through `postern serve
//! --stdio`, and through `postern connect` in front of an HTTP `postern serve` — and every
//! capability's result through Postern must equal the direct one (Postern's own additions
//! taken off: its execution block, the `ev_` prefix). Two rows differ by design and must differ
//! exactly so: `roots` (an upstream asking outside a call gets no roots) and `list_changed`
//! (through Postern the list is whole before the client is served). docs/interop.md keeps the
//! table. Both servers run under the default sandbox (server-filesystem with its directory in
//! `sandbox.write`).

use postern_testkit::unprivileged::give_to_nobody;
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
    "task-required tool",
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
    let rows = run_matrix("matrix", &config, &[], &node, &everything, &[]).await;
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
    // A tool the server lists with `execution.taskSupport: "required"` refuses a call without
    // a task with an error result, the same through Postern (rmcp 3.11 does not read that
    // field, so Postern cannot call it with a task).
    let task = row("task-required tool");
    assert!(
        task["stdio"]["content"]
            .to_string()
            .contains("requires task augmentation"),
        "{task:#}"
    );
    // Tools, prompts and resources exist in every column (list_changed: whole before served).
    assert_eq!(
        row("list_changed")["direct"]["tools list_changed seen"],
        true
    );
}

/// The matrix's two server-filesystem rows: a 1 MiB file read by a tool the operator declared
/// read-only (`read_only = ["read_*"]`: more than the default 256 KiB answer cap, and returned
/// whole because a read stores nothing), and an `isError` answer (a write outside the served
/// directory) — each the same through `postern serve --stdio` and `postern connect` as direct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_filesystem_large_reads_and_errors_are_what_it_says_directly() {
    require_sdk().await;
    let node = NodeClients::require();
    let filesystem = node
        .package("@modelcontextprotocol/server-filesystem")
        .join("dist/index.js");
    let files = Dir::new("matrix-fs-files");
    // The directory it serves is the one its sandbox may write (and its user's, when the tests
    // run as root).
    give_to_nobody(&files.0);
    let config = format!(
        r#"{GATEWAY}tools = ["fs_*"]

[upstream.fs]
command = [{node:?}, {filesystem:?}, {files:?}]
expose = "all"
read_only = ["read_*", "list_*", "get_*", "search_*", "directory_tree"]
sandbox = {{ write = [{files:?}] }}
"#,
        node = node.node_binary().to_str().unwrap(),
        filesystem = filesystem.to_str().unwrap(),
        files = files.0.to_str().unwrap(),
    );
    let files_dir = files.0.to_str().unwrap();
    let rows = run_matrix(
        "matrix-fs",
        &config,
        &["--filesystem"],
        &node,
        &filesystem,
        &[files_dir],
    )
    .await;
    let large = &rows["large output (1 MiB read-only)"];
    assert!(
        large["direct"]["bytes"].as_u64().unwrap() >= 1024 * 1024,
        "the direct read is the whole file: {}",
        large["direct"]["bytes"]
    );
    for name in ["large output (1 MiB read-only)", "isError"] {
        let row = &rows[name];
        assert_eq!(
            row["same"],
            true,
            "{name}: through Postern differs from the direct server:\n{}",
            // The large row's answers are a megabyte each: show their sizes, not them.
            if name == "isError" {
                row.to_string()
            } else {
                format!(
                    "bytes: {} / {} / {}; same: {}",
                    row["direct"]["bytes"],
                    row["stdio"]["bytes"],
                    row["connect"]["bytes"],
                    row["same"]
                )
            }
        );
    }
    assert_eq!(
        rows["isError"]["direct"]["isError"], true,
        "{}",
        rows["isError"]
    );
}

/// Runs `python_matrix.py [mode] POSTERN CONFIG NODE SERVER [extra…] URL`: the "stdio" column a
/// `postern serve --stdio` of `config`, the "connect" column `postern connect` in front of an
/// HTTP `postern serve` of the same config; the rows it printed.
async fn run_matrix(
    tag: &str,
    config: &str,
    mode: &[&str],
    node: &NodeClients,
    server: &std::path::Path,
    extra: &[&str],
) -> Value {
    let stdio_dir = Dir::new(&format!("{tag}-stdio"));
    prepare(&stdio_dir.0, config);
    let http_dir = Dir::new(&format!("{tag}-http"));
    let served = Served::start(&http_dir.0, config);
    let script = repo_root().join("tests/interop/python_matrix.py");
    let stdio_config = stdio_dir.0.join("postern.toml");
    let mut args = vec![script.to_str().unwrap()];
    args.extend(mode);
    args.extend([
        env!("CARGO_BIN_EXE_postern"),
        stdio_config.to_str().unwrap(),
        node.node_binary().to_str().unwrap(),
        server.to_str().unwrap(),
    ]);
    args.extend(extra);
    args.push(&served.url);
    let mut command = python3(&args);
    command.env("POSTERN_TOKEN", BILLING_TOKEN);
    let out = output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python_matrix.py {mode:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    served.stop();
    serde_json::from_str(stdout.trim()).unwrap()
}

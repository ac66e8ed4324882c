//! Issue 48 points 3, 7 and 8, with the official Python SDK (`tests/interop/python_shapes.py`)
//! in front of the npm reference servers server-memory, server-filesystem and
//! server-everything, all under the default sandbox.
//!
//! - Every result validates against the tool's `outputSchema` (the SDK raises when a successful
//!   result's structured content does not): an applied answer, a replay, an answer over
//!   `max_response_bytes`, a pending approval, a denied call, an unknown outcome (the server
//!   stopped mid-call) — over HTTP in both protocol eras and over stdio.
//! - Invalid arguments are an `isError` result; an unknown tool is a JSON-RPC error.
//! - A 5 MB file read over HTTP reaches the SDK whole: a plain read-only call is answered as
//!   JSON, not as one SSE event over the SDK's 1 MiB event limit.

use postern_testkit::unprivileged::give_to_nobody;
use serde_json::Value;

use crate::foreign::{output, repo_root, NodeClients};
use crate::harness::{prepare, write_private, Dir, Served, ALICE_TOKEN, BILLING_TOKEN};
use crate::interop::{python3, require_sdk};
use crate::upstream::GATEWAY;

/// The gateway's config: the three servers, a capped and an approved tool over server-memory
/// (tools a `[[tool]]` binds are not exposed again under the upstream's prefix).
/// `marker` is an argument server-memory ignores, so its process can be told from another
/// gateway's; `files` is server-filesystem's directory, `memory` server-memory's.
fn config(node: &NodeClients, marker: &str, files: &Dir, memory: &Dir) -> String {
    let package = |name: &str| {
        node.package(&format!("@modelcontextprotocol/{name}"))
            .join("dist/index.js")
    };
    format!(
        r#"{GATEWAY}tools = ["memory_*", "fs_*", "ev_*", "open_capped", "search_approved"]

[[operator]]
name = "alice"
token = {{ file = "alice.token" }}

[upstream.memory]
command = [{node:?}, {memory_js:?}, {marker:?}]
env = {{ MEMORY_FILE_PATH = {memory_file:?} }}
expose = "all"
timeout = "3s"
match_window = "10m"
read_only = ["read_graph", "search_nodes", "open_nodes"]
sandbox = {{ write = [{memory_dir:?}] }}

[upstream.fs]
command = [{node:?}, {fs_js:?}, {files:?}]
expose = "all"
read_only = ["read_*", "list_*", "get_*", "search_*", "directory_tree"]
sandbox = {{ write = [{files:?}] }}

[upstream.ev]
command = [{node:?}, {ev_js:?}, "stdio"]
expose = "all"
default_class = "read_only"

[[tool]]
name = "open_capped"
class = "idempotent_write"
match_window = "10m"
mcp = {{ server = "memory", tool = "open_nodes", max_response_bytes = 1024 }}

[[tool]]
name = "search_approved"
class = "idempotent_write"
match_window = "10m"
approval = "every_call"
mcp = {{ server = "memory", tool = "search_nodes" }}
"#,
        node = node.node_binary().to_str().unwrap(),
        memory_js = package("server-memory").to_str().unwrap(),
        fs_js = package("server-filesystem").to_str().unwrap(),
        ev_js = package("server-everything").to_str().unwrap(),
        memory_file = memory.0.join("graph.jsonl").to_str().unwrap(),
        memory_dir = memory.0.to_str().unwrap(),
        files = files.0.to_str().unwrap(),
    )
}

/// Directories an upstream under the sandbox may write (its user's when the tests run as root).
fn writable(tag: &str) -> Dir {
    let dir = Dir::new(tag);
    give_to_nobody(&dir.0);
    dir
}

/// `python_shapes.py ARGS…`: the rows it printed.
async fn shapes(args: &[&str]) -> Value {
    let script = repo_root().join("tests/interop/python_shapes.py");
    let mut all = vec![script.to_str().unwrap()];
    all.extend(args);
    let mut command = python3(&all);
    command
        .env("POSTERN_TOKEN", BILLING_TOKEN)
        .env("POSTERN_BIN", env!("CARGO_BIN_EXE_postern"));
    let out = output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python_shapes.py {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_result_shape_validates_against_the_servers_output_schemas() {
    require_sdk().await;
    let node = NodeClients::require();
    let files = writable("shapes-files");
    let (http_memory, stdio_memory) = (writable("shapes-mem-http"), writable("shapes-mem-stdio"));
    let http_dir = Dir::new("shapes-http");
    write_private(&http_dir.0.join("alice.token"), ALICE_TOKEN);
    let http_marker = format!("shapes-http-{}", std::process::id());
    let served = Served::start(
        &http_dir.0,
        &config(&node, &http_marker, &files, &http_memory),
    );
    let stdio_dir = Dir::new("shapes-stdio");
    write_private(&stdio_dir.0.join("alice.token"), ALICE_TOKEN);
    let stdio_marker = format!("shapes-stdio-{}", std::process::id());
    prepare(
        &stdio_dir.0,
        &config(&node, &stdio_marker, &files, &stdio_memory),
    );
    let stdio_config = stdio_dir.0.join("postern.toml");

    let mut seen = Vec::new();
    for era in ["legacy", "2026-07-28"] {
        let ops = served.url.trim_end_matches("/mcp");
        let rows = shapes(&[era, &http_marker, &served.url, ops, ALICE_TOKEN]).await;
        seen.push((era, rows));
    }
    let rows = shapes(&["stdio", &stdio_marker, stdio_config.to_str().unwrap()]).await;
    seen.push(("stdio", rows));
    for (column, rows) in &seen {
        for row in [
            "applied (memory_read_graph)",
            "applied (fs_list_allowed_directories)",
            "applied (ev_get-structured-content)",
            "replay of a stored answer",
            "over max_response_bytes",
            "pending approval",
            "invalid arguments",
            "unknown tool",
            "unknown outcome",
        ] {
            assert!(
                rows.get(row).is_some(),
                "{column}: no row {row:?} in {rows}"
            );
        }
        assert_eq!(
            rows["unknown outcome"]["state"], "outcome_unknown",
            "{column}: {rows}"
        );
        assert_eq!(
            rows["pending approval"]["state"], "awaiting_approval",
            "{column}: {rows}"
        );
        assert_eq!(rows["unknown tool"]["error"], -32602, "{column}: {rows}");
    }
    for (column, rows) in &seen[..2] {
        assert_eq!(rows["denied"]["state"], "denied", "{column}: {rows}");
    }
    served.stop();
}

/// A 5 MB file read by server-filesystem's `read_text_file` (declared read-only) over HTTP:
/// the SDK gets it whole in both eras (its text twice over — content and structuredContent —
/// is ten times the SDK's 1 MiB SSE event limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_megabyte_read_reaches_the_python_sdk_over_http() {
    require_sdk().await;
    let node = NodeClients::require();
    let files = writable("large-files");
    let memory = writable("large-mem");
    let dir = Dir::new("large-http");
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    let served = Served::start(&dir.0, &config(&node, "large", &files, &memory));
    let file = files.0.join("five.txt");
    let line = "0123456789abcdef".repeat(4) + "\n";
    std::fs::write(&file, line.repeat(5 * 1024 * 1024 / line.len() + 1)).unwrap();
    for era in ["legacy", "2026-07-28"] {
        let rows = shapes(&["--large", era, &served.url, file.to_str().unwrap()]).await;
        assert_eq!(rows["same"], true, "{era}: {rows}");
        assert!(
            rows["bytes"].as_u64().unwrap() > 5 * 1024 * 1024,
            "{era}: {rows}"
        );
    }
    served.stop();
}

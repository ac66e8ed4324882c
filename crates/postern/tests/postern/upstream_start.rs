//! Issue 32, start-up: a desktop host (the Python SDK's stdio client) starts `postern serve
//! --stdio` in front of three upstreams — the npm reference servers `server-everything` and
//! `server-memory` (pinned) and the demo upstream — and lists the tools once, right after
//! `initialize`: every upstream's tools are there, none unavailable, because `serve` waits for
//! each upstream's first connection (up to its `startup_timeout`) before it answers.

use postern_testkit::unprivileged::give_to_nobody;

use crate::foreign::{output, repo_root, NodeClients};
use crate::harness::{prepare, Dir};
use crate::interop::{python3, require_sdk};
use crate::upstream::GATEWAY;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_lists_tools_once_at_start_sees_every_upstreams_tools() {
    require_sdk().await;
    let node = NodeClients::require();
    let package = |name: &str| {
        node.package(&format!("@modelcontextprotocol/{name}"))
            .join("dist/index.js")
    };
    let dir = Dir::new("up-start");
    let journal = crate::upstream::upstream_journal(&dir.0);
    // server-memory's file, in a directory of its own that its sandbox may write.
    let memory_dir = dir.0.join("memory");
    std::fs::create_dir_all(&memory_dir).unwrap();
    give_to_nobody(&memory_dir);
    let config = format!(
        r#"{GATEWAY}tools = ["ev_*", "mem_*", "create_invoice"]

[upstream.ev]
command = [{node:?}, {everything:?}, "stdio"]
expose = "all"
default_class = "read_only"

[upstream.mem]
command = [{node:?}, {memory:?}]
env = {{ MEMORY_FILE_PATH = {memory_file:?} }}
expose = "all"
sandbox = {{ write = [{memory_dir:?}] }}

{books}
[[tool]]
name = "create_invoice"
class = "irreversible"
match_window = "10m"
mcp = {{ server = "books", tool = "create_invoice" }}
"#,
        node = node.node_binary().to_str().unwrap(),
        everything = package("server-everything").to_str().unwrap(),
        memory = package("server-memory").to_str().unwrap(),
        memory_file = memory_dir.join("memory.jsonl").to_str().unwrap(),
        books = crate::upstream::stdio_upstream(&journal),
    );
    prepare(&dir.0, &config);
    let script = repo_root().join("tests/interop/python_host_start.py");
    let out = output(python3(&[
        script.to_str().unwrap(),
        env!("CARGO_BIN_EXE_postern"),
        dir.0.join("postern.toml").to_str().unwrap(),
    ]))
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python_host_start.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    for want in [
        "ev_echo",
        "ev_get-env",
        "mem_read_graph",
        "mem_create_entities",
        "create_invoice",
        "execution_status",
    ] {
        assert!(tools.contains(&want), "{want} is not listed: {tools:?}");
    }
    assert_eq!(seen["unavailable"], serde_json::json!([]), "{seen}");
}

/// Issue 32, results the model can read: the same tools of `server-everything` called directly
/// (a raw stdio client) and through `postern serve`: the result's `content` through Postern is
/// the upstream's own blocks unchanged (text, an image, resource links), followed by one text
/// block naming the execution; the record is in `_meta["io.postern/execution"]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_content_reaches_the_model_unchanged() {
    use crate::harness::{Mcp, Served, BILLING_TOKEN};
    use serde_json::json;
    let node = NodeClients::require();
    let everything = node
        .package("@modelcontextprotocol/server-everything")
        .join("dist/index.js");
    let calls = [
        ("echo", json!({"message": "hello through postern"})),
        ("get-tiny-image", json!({})),
        ("get-resource-links", json!({"count": 2})),
    ];
    // The same server reached directly, by a raw stdio client.
    let mut command = tokio::process::Command::new(node.node_binary());
    command
        .arg(&everything)
        .arg("stdio")
        .stderr(std::process::Stdio::null());
    let mut direct = crate::stdio::StdioAgent::spawn(command);
    direct
        .request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "direct", "version": "1"}}),
        )
        .await;
    direct
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let mut expected = Vec::new();
    for (i, (tool, arguments)) in calls.iter().enumerate() {
        let params = json!({"name": tool, "arguments": arguments});
        let response = direct.request(i as u64 + 10, "tools/call", params).await;
        expected.push(response["result"]["content"].clone());
    }
    let dir = Dir::new("up-content");
    let config = format!(
        "{GATEWAY}tools = [\"ev_*\"]\n\n[upstream.ev]\ncommand = [{:?}, {:?}, \"stdio\"]\nexpose = \"all\"\ndefault_class = \"read_only\"\n",
        node.node_binary().to_str().unwrap(),
        everything.to_str().unwrap()
    );
    let served = Served::start(&dir.0, &config);
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    for ((tool, arguments), want) in calls.iter().zip(expected) {
        let response = mcp
            .call(&format!("ev_{tool}"), arguments.clone(), json!({}))
            .await;
        let result = &response["result"];
        let content = result["content"].as_array().unwrap();
        let (last, upstream) = content.split_last().unwrap();
        assert_eq!(
            json!(upstream),
            want,
            "{tool}: the upstream's blocks, unchanged"
        );
        let id = result["_meta"]["io.postern/execution"]["execution_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}: no execution in _meta: {result}"));
        assert!(
            last["text"].as_str().is_some_and(|t| t.contains(id)),
            "{tool}: the last block names the execution: {last}"
        );
    }
    drop(direct);
}

/// Issue 32, upstream faults: the npm `server-filesystem` refuses a path outside its allowed
/// directory with `isError: true`; the client sees `isError: true` either way, as it would
/// directly. Under the default `on_tool_error = "unknown"` the agent is
/// told the upstream answered with an error (quoted), not that no answer came back; an upstream
/// served whole with `on_tool_error = "rejected"` makes the same answer a rejection, an error
/// result an identical retry may repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_is_told_as_what_it_is() {
    use crate::harness::{Mcp, Served, BILLING_TOKEN};
    use serde_json::json;
    let node = NodeClients::require();
    let fs = node
        .package("@modelcontextprotocol/server-filesystem")
        .join("dist/index.js");
    for (verdict, state, is_error) in [
        ("unknown", "outcome_unknown", true),
        ("rejected", "completed", true),
    ] {
        let dir = Dir::new(&format!("up-iserror-{verdict}"));
        let allowed = dir.0.join("allowed");
        std::fs::create_dir_all(&allowed).unwrap();
        give_to_nobody(&allowed);
        // The directory it serves is the one its sandbox may write.
        let config = format!(
            "{GATEWAY}tools = [\"fs_*\"]\n\n[upstream.fs]\ncommand = [{:?}, {:?}, {:?}]\nexpose = \"all\"\non_tool_error = \"{verdict}\"\nread_only = [\"read_*\"]\nsandbox = {{ write = [{:?}] }}\n",
            node.node_binary().to_str().unwrap(),
            fs.to_str().unwrap(),
            allowed.to_str().unwrap(),
            allowed.to_str().unwrap()
        );
        let served = Served::start(&dir.0, &config);
        let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
        let response = mcp
            .call(
                "fs_write_file",
                json!({"path": "/tmp/outside.txt", "content": "x"}),
                json!({}),
            )
            .await;
        let result = &response["result"];
        let execution = &result["_meta"]["io.postern/execution"];
        assert_eq!(execution["state"], state, "{verdict}: {result}");
        if verdict == "rejected" {
            assert_eq!(execution["outcome"], "rejected", "{result}");
        }
        assert_eq!(result["isError"], is_error, "{verdict}: {result}");
        let texts: Vec<&str> = result["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect();
        assert!(
            texts.iter().any(|t| t.contains("Access denied")),
            "{verdict}: the upstream's words reach the model: {texts:?}"
        );
        if verdict == "unknown" {
            let step = execution["next_step"].as_str().unwrap();
            assert!(
                step.starts_with("the upstream answered with an error"),
                "{step}"
            );
            assert!(!step.contains("no answer came back"), "{step}");
        }
        // Issue 48 point 9: a read's error changed nothing, whatever on_tool_error says of
        // writes: rejected, never "an error may follow a partial effect … do not retry".
        let read = mcp
            .call(
                "fs_read_text_file",
                json!({"path": "/tmp/outside.txt"}),
                json!({}),
            )
            .await;
        let result = &read["result"];
        let execution = &result["_meta"]["io.postern/execution"];
        assert_eq!(result["isError"], true, "{verdict}: {result}");
        assert_eq!(execution["outcome"], "rejected", "{verdict}: {result}");
        assert!(
            !result.to_string().contains("partial effect"),
            "{verdict}: {result}"
        );
    }
}

//! Issue 48, long calls and Postern's own refusals, in front of server-everything (the npm
//! reference server, pinned): a call runs as long as its upstream keeps it alive (each progress
//! report extends the upstream's `timeout`, up to its `max_duration`); `postern connect` never
//! cancels a call of its own accord; a call the upstream fails because Postern refused it a
//! question is `rejected`, and the identical call from a client that can answer is a new
//! attempt, and its answer (which holds what that client gave) is never shown to another run.
//! The 45 s row runs on every path at once (direct, `serve --stdio`, HTTP `serve`,
//! `postern connect`) with the defaults `init` writes.

use serde_json::{json, Value};

use crate::foreign::{output, repo_root, NodeClients};
use crate::harness::{prepare, Dir, Mcp, Served, BILLING_TOKEN};
use crate::interop::{python3, require_sdk};
use crate::upstream::GATEWAY;

/// server-everything as upstream `ev`, every tool served (class `irreversible`, the default).
fn everything(node: &NodeClients, extra: &str) -> String {
    let everything = node
        .package("@modelcontextprotocol/server-everything")
        .join("dist/index.js");
    format!(
        "{GATEWAY}tools = [\"ev_*\"]\n\n[upstream.ev]\ncommand = [{:?}, {:?}, \"stdio\"]\nexpose = \"all\"\n{extra}",
        node.node_binary().to_str().unwrap(),
        everything.to_str().unwrap(),
    )
}

/// The execution block Postern adds to a result (`_meta`, where every result shape has it).
fn recorded(response: &Value) -> &Value {
    &response["result"]["_meta"]["io.postern/execution"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_keeps_a_call_alive_past_its_timeout_up_to_max_duration() {
    let node = NodeClients::require();
    let dir = Dir::new("long-progress");
    let served = Served::start(
        &dir.0,
        &everything(&node, "timeout = \"2s\"\nmax_duration = \"5s\"\n"),
    );
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    // 4 s in 5 steps: a report every 0.8 s, each extending the 2 s timeout.
    let long = mcp
        .call(
            "ev_trigger-long-running-operation",
            json!({"duration": 4, "steps": 5}),
            json!({}),
        )
        .await;
    assert_eq!(long["result"]["isError"], false, "{long:#}");
    assert_eq!(recorded(&long)["outcome"], "applied", "{long:#}");
    assert!(
        long["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("completed")),
        "{long:#}"
    );
    // 8 s with reports all along: ended at max_duration (5 s), cancelled upstream, unknown.
    let started = std::time::Instant::now();
    let endless = mcp
        .call(
            "ev_trigger-long-running-operation",
            json!({"duration": 8, "steps": 10}),
            json!({}),
        )
        .await;
    let took = started.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(5) && took < std::time::Duration::from_secs(8),
        "ended after {took:?}: {endless:#}"
    );
    assert_eq!(
        recorded(&endless)["state"],
        "outcome_unknown",
        "{endless:#}"
    );
    let trace = crate::harness::activity(
        &dir.0,
        &["show", recorded(&endless)["execution_id"].as_str().unwrap()],
    );
    assert!(
        trace.to_string().contains("max_duration of 5s"),
        "the record says why it ended: {trace:#}"
    );
    served.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_45_second_call_and_a_refusal_on_every_path() {
    require_sdk().await;
    let node = NodeClients::require();
    let config = everything(&node, "");
    let stdio_dir = Dir::new("long-stdio");
    prepare(&stdio_dir.0, &config);
    let http_dir = Dir::new("long-http");
    let served = Served::start(&http_dir.0, &config);
    let script = repo_root().join("tests/interop/python_long_calls.py");
    let everything_js = node
        .package("@modelcontextprotocol/server-everything")
        .join("dist/index.js");
    let stdio_config = stdio_dir.0.join("postern.toml");
    let mut command = python3(&[
        script.to_str().unwrap(),
        env!("CARGO_BIN_EXE_postern"),
        stdio_config.to_str().unwrap(),
        node.node_binary().to_str().unwrap(),
        everything_js.to_str().unwrap(),
        &served.url,
        "45",
    ]);
    command.env("POSTERN_TOKEN", BILLING_TOKEN);
    let out = output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python_long_calls.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_str(stdout.trim()).unwrap();
    println!("{rows:#}");
    let long = &rows["long call"];
    for column in ["direct", "stdio", "http", "connect"] {
        let row = &long[column];
        assert_eq!(row["isError"], false, "long call, {column}: {long:#}");
        assert_eq!(
            row["progress"], 5,
            "long call, {column}: every report: {long:#}"
        );
        assert!(
            row["text"]
                .as_str()
                .is_some_and(|t| t.contains("completed")),
            "long call, {column}: {long:#}"
        );
        if column != "direct" {
            assert_eq!(
                row["outcome"], "applied",
                "long call, {column}: recorded applied: {long:#}"
            );
        }
    }
    let refusal = &rows["refusal"];
    for column in ["stdio", "http", "connect"] {
        let row = &refusal[column];
        let without = &row["without sampling"];
        assert_eq!(without["isError"], true, "refusal, {column}: {refusal:#}");
        assert_eq!(
            without["outcome"], "rejected",
            "refusal, {column}: Postern's refusal is recorded rejected, not unknown: {refusal:#}"
        );
        assert!(
            without["text"]
                .as_str()
                .is_some_and(|t| t.contains("Postern passed no answer") && t.contains("sampling")),
            "refusal, {column}: the reason is plain: {refusal:#}"
        );
        let with = &row["with sampling"];
        assert_eq!(with["isError"], false, "refusal, {column}: {refusal:#}");
        assert_eq!(
            with["outcome"], "applied",
            "refusal, {column}: the capable client's call is a new attempt: {refusal:#}"
        );
        assert_ne!(
            with["execution_id"], without["execution_id"],
            "refusal, {column}: {refusal:#}"
        );
        // The answer holds what the second session's client gave: another run is told the
        // execution, never shown it from the record.
        let another = &row["another run"];
        let status = &row["another run's execution_status"];
        assert!(
            status.to_string().contains("shown only to that run")
                && !status.to_string().contains("long-calls-model"),
            "refusal, {column}: execution_status withholds it too: {refusal:#}"
        );
        assert_eq!(another["execution_id"], with["execution_id"], "{refusal:#}");
        assert!(
            !another.to_string().contains("long-calls-model")
                && another["postern"].as_str().is_some_and(
                    |t| t.contains("shown only to that run")
                        // What the agent can do for a new action, the time included (point 9).
                        && t.contains("an identical call is answered from this record until 20")
                        && t.contains("a model cannot set it itself")
                ),
            "refusal, {column}: {refusal:#}"
        );
    }
    served.stop();
}

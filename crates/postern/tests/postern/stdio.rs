//! `postern serve --stdio` (issue #5 item 3): a local agent speaks MCP over the gateway's
//! stdin/stdout as the configured actor; calls get the same execution identity and matching
//! as over HTTP.

use std::process::Stdio;

use postern_demo::target::InvoiceApi;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::harness::{config, prepare, Dir};

/// A `postern serve --stdio` process spoken to over its stdin/stdout (also used by
/// `investigate`, whose stdio run ends with its transport).
pub(crate) struct StdioAgent {
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl StdioAgent {
    pub(crate) fn start(dir: &Dir, args: &[&str]) -> StdioAgent {
        let config = dir.0.join("postern.toml");
        let mut command = Command::new(env!("CARGO_BIN_EXE_postern"));
        command
            .args(["serve", "--stdio", "-c", config.to_str().unwrap()])
            .args(args)
            .stderr(Stdio::inherit());
        StdioAgent::spawn(command)
    }

    /// Any MCP server on stdio (e.g. an upstream reached directly, to compare with Postern).
    pub(crate) fn spawn(mut command: Command) -> StdioAgent {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        StdioAgent {
            child,
            stdin,
            stdout,
        }
    }

    pub(crate) async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends a request and returns the response with the same id (skipping notifications).
    pub(crate) async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line =
                tokio::time::timeout(std::time::Duration::from_secs(20), self.stdout.next_line())
                    .await
                    .expect("an answer within 20 s")
                    .unwrap()
                    .expect("stdout open");
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC ({e}): {line:?}"));
            if v["id"] == json!(id) {
                return v;
            }
        }
    }
}

#[tokio::test]
async fn a_local_agent_over_stdio_gets_executions_and_matching() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("stdio");
    prepare(&dir.0, &config(&format!("http://{}", target.addr)));

    // Two actors are configured: --stdio must be told which one it serves.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args([
            "serve",
            "--stdio",
            "-c",
            dir.0.join("postern.toml").to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--actor"),
        "names the missing flag: {}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let mut agent = StdioAgent::start(&dir, &["--actor", "billing"]);
    let init = agent
        .request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "stdio-test", "version": "1"}}),
        )
        .await;
    assert_eq!(init["result"]["serverInfo"]["name"], "postern", "{init}");
    agent
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    let listed = agent.request(2, "tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"create_invoice") && names.contains(&"execution_status"),
        "{names:?}"
    );

    let args = json!({"customer": "stdio-co", "amount": 12});
    let first = agent
        .request(
            3,
            "tools/call",
            json!({"name": "create_invoice", "arguments": args}),
        )
        .await;
    let ex = &first["result"]["structuredContent"]["execution"];
    assert_eq!(ex["state"], "completed", "{first}");
    assert_eq!(ex["attempt"], "new", "{first}");
    let id = ex["execution_id"].as_str().unwrap().to_string();

    // The agent lost the answer and asks again: the same execution, from the record.
    let again = agent
        .request(
            4,
            "tools/call",
            json!({"name": "create_invoice", "arguments": args}),
        )
        .await;
    let ex = &again["result"]["structuredContent"]["execution"];
    assert_eq!(ex["execution_id"], id.as_str(), "{again}");
    assert_eq!(ex["attempt"], "recovered", "{again}");
    assert_eq!(target.state.count_for("stdio-co"), 1);

    // Bad input is a clear error result (the model can correct it) and records nothing.
    let bad = agent
        .request(
            5,
            "tools/call",
            json!({"name": "create_invoice", "arguments": {"customer": 7}}),
        )
        .await;
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert!(
        bad["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("/customer")),
        "{bad}"
    );

    // The run is in the Sessions log as the configured actor, over stdio.
    drop(agent.stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), agent.child.wait())
        .await
        .expect("exits when stdin closes")
        .unwrap();
    assert!(status.success(), "{status}");
    let store = format!("sqlite://{}", dir.0.join("ledger.db").display());
    let (ledger, _) = postern_ledger::Ledger::open(&store, Default::default())
        .await
        .unwrap();
    let runs = ledger.read().runs(10).await.unwrap();
    let run = runs
        .iter()
        .find(|r| r.actor == "billing" && r.transport == "stdio")
        .unwrap_or_else(|| panic!("{runs:?}"));
    // Its end is recorded as the transport closing, with the client it named.
    assert_eq!(
        run.end_reason,
        Some(postern_ledger::RunEnd::TransportClosed),
        "{run:?}"
    );
    assert!(run.ended_at.is_some());
    assert_eq!(run.client_name.as_deref(), Some("stdio-test"));
    // Every call is in the calls log with its JSON-RPC id and attempt; the refusal too.
    let calls = ledger.read().calls_in(&run.id, 10).await.unwrap();
    let seen: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c.request_id.as_deref().unwrap_or("-"), c.attempt.as_str()))
        .collect();
    assert_eq!(
        seen,
        [("3", "new"), ("4", "recovered"), ("5", "refused")],
        "{calls:?}"
    );
    assert_eq!(calls[2].outcome, "invalid_arguments");
    let shown = ledger
        .read()
        .summary(id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(shown.actor, "billing");
}

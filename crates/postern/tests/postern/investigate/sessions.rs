//! The Sessions log records every way a run ends, each read back with `postern sessions show
//! RUN --json` (the operator API's `GET /ops/runs/{id}`), with the run's calls and their
//! attempts: `closed` (the client's `DELETE`), `transport_closed` (a stdio client goes away),
//! `idle_expired` (no call for `[gateway] session_idle`) and `gateway_stopped` (SIGTERM). A run
//! that ended only because it idled or its gateway stopped is resumed by its next call.

use serde_json::{json, Value};

use super::{invoice, setup, with_operator};
use crate::harness::{
    eventually, execution, execution_id, operator, operator_json, posts, prepare, write_private,
    Dir, Mcp, Served, ALICE_TOKEN, BILLING_TOKEN,
};
use crate::stdio::StdioAgent;
use postern_demo::target::InvoiceApi;

fn show(served: &Served, run: &str) -> Value {
    operator_json(served, &["sessions", "show", run])
}

/// The run's calls as (JSON-RPC id, attempt, execution id or "-", outcome).
fn calls(run: &Value) -> Vec<(String, String, String, String)> {
    run["calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no calls in {run:#}"))
        .iter()
        .map(|c| {
            (
                c["request_id"].as_str().unwrap_or("-").to_string(),
                c["attempt"].as_str().unwrap().to_string(),
                c["execution_id"].as_str().unwrap_or("-").to_string(),
                c["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn call(
    id: &str,
    attempt: &str,
    execution: &str,
    outcome: &str,
) -> (String, String, String, String) {
    (id.into(), attempt.into(), execution.into(), outcome.into())
}

/// The fields every run shows: its actor, client, protocol and transport, a start, and an end
/// with its reason (or none).
fn assert_run(run: &Value, id: &str, transport: &str, client: &str, end: Option<&str>) {
    assert_eq!(run["run_id"], id, "{run:#}");
    assert_eq!(run["actor"], "billing", "{run:#}");
    assert_eq!(run["client"], client, "{run:#}");
    assert!(run["client_version"].is_string(), "{run:#}");
    assert!(run["protocol_version"].is_string(), "{run:#}");
    assert_eq!(run["transport"], transport, "{run:#}");
    assert!(run["started_at"].is_string(), "{run:#}");
    assert_eq!(run["authorization"], "not_required", "{run:#}");
    match end {
        Some(how) => {
            assert_eq!(run["end_reason"], how, "{run:#}");
            let (started, ended) = (
                run["started_at"].as_str().unwrap(),
                run["ended_at"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{run:#}")),
            );
            assert!(started <= ended, "{run:#}");
        }
        None => {
            assert!(run["ended_at"].is_null(), "{run:#}");
            assert!(run["end_reason"].is_null(), "{run:#}");
        }
    }
}

/// A `DELETE` of the session ends its run as `closed`; its calls are listed with their
/// attempts, the refused one too; the end is final (the closed session takes no more calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_sessions_a_closed_session() {
    let s = setup("inv-closed").await;
    let agent = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let run = agent.run_id();
    let first = agent
        .call("create_invoice", invoice("closed-co"), json!({}))
        .await;
    let again = agent
        .call("create_invoice", invoice("closed-co"), json!({}))
        .await;
    let bad = agent
        .call("create_invoice", json!({"customer": 7}), json!({}))
        .await;
    // Invalid arguments: an error result the model can correct, refused in the calls log.
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    let id = execution_id(&first);
    assert_eq!(execution_id(&again), id);

    let open = show(&s.served, &run);
    assert_run(&open, &run, "streamable-http", "postern-tests", None);

    let closed = agent.close().await;
    assert!((200..300).contains(&closed), "DELETE answered {closed}");
    let mut shown = Value::Null;
    eventually("the run's end and its three calls", || {
        shown = show(&s.served, &run);
        shown["ended_at"].is_string() && calls(&shown).len() == 3
    })
    .await;
    assert_run(
        &shown,
        &run,
        "streamable-http",
        "postern-tests",
        Some("closed"),
    );
    assert_eq!(
        calls(&shown),
        [
            call("1", "new", &id, "completed"),
            call("2", "recovered", &id, "completed"),
            call("3", "refused", "-", "invalid_arguments"),
        ]
    );
    // The list says the same.
    let listed = operator_json(&s.served, &["sessions", "list"]);
    let row = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run.as_str())
        .unwrap_or_else(|| panic!("{listed:#}"));
    assert_eq!(row["end_reason"], "closed");
    // The text view names the end and every call.
    let (code, text, err) = operator(&s.served, &["sessions", "show", &run]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("(closed)"), "{text}");
    assert!(
        text.contains("recovered") && text.contains("invalid_arguments"),
        "{text}"
    );
    // An unknown run is an error naming it.
    let (code, _, err) = operator(&s.served, &["sessions", "show", "mcp-session:nobody"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nobody"), "{err}");
}

/// A stdio client that goes away ends its run as `transport_closed`, read back from a gateway
/// on the same store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_sessions_a_stdio_client_that_goes_away() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("inv-stdio");
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    let text = with_operator(&format!("http://{}", target.addr));
    prepare(&dir.0, &text);
    let mut agent = StdioAgent::start(&dir, &["--actor", "billing"]);
    let pid = agent.child.id().unwrap();
    let init = agent
        .request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "stdio-agent", "version": "7"}}),
        )
        .await;
    assert!(init["result"].is_object(), "{init}");
    agent
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let args = json!({"name": "create_invoice", "arguments": invoice("stdio-end-co")});
    let first = agent.request(2, "tools/call", args.clone()).await;
    let again = agent.request(3, "tools/call", args).await;
    let id = first["result"]["structuredContent"]["execution"]["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        again["result"]["structuredContent"]["execution"]["attempt"],
        "recovered"
    );
    // The client goes away: its end of the pipe closes.
    drop(agent.stdin);
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), agent.child.wait())
        .await
        .expect("the stdio gateway exits when its client goes")
        .unwrap();
    assert!(status.success(), "{status}");

    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    // The run is named by the process and its start (a pid alone is reused by the system).
    let runs = operator_json(&served, &["sessions", "list"]);
    let run = runs["runs"][0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs:#}");
    assert!(run.starts_with(&format!("stdio:{pid}-")), "{run}");
    let shown = show(&served, &run);
    assert_run(
        &shown,
        &run,
        "stdio",
        "stdio-agent",
        Some("transport_closed"),
    );
    assert_eq!(shown["client_version"], "7");
    assert_eq!(
        calls(&shown),
        [
            call("2", "new", &id, "completed"),
            call("3", "recovered", &id, "completed"),
        ]
    );
    assert_eq!(posts(&target.state), 1);
}

/// No call for `[gateway] session_idle` ends a run as `idle_expired`; its next call resumes
/// it, and idling again ends it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_sessions_an_idle_run_expires() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("inv-idle");
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    let text = with_operator(&format!("http://{}", target.addr)).replace(
        "attach_wait = \"10s\"",
        "attach_wait = \"10s\"\nsession_idle = \"1s\"",
    );
    let served = Served::start(&dir.0, &text);
    let agent = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let run = agent.run_id();
    let first = agent
        .call("create_invoice", invoice("idle-co"), json!({}))
        .await;
    let id = execution_id(&first);

    let mut shown = Value::Null;
    eventually("the idle run to expire", || {
        shown = show(&served, &run);
        shown["end_reason"] == "idle_expired"
    })
    .await;
    assert_run(
        &shown,
        &run,
        "streamable-http",
        "postern-tests",
        Some("idle_expired"),
    );
    assert_eq!(calls(&shown), [call("1", "new", &id, "completed")]);
    let first_end = shown["ended_at"].as_str().unwrap().to_string();

    // The agent comes back: the same run carries on (its call is recorded in it), and ends
    // again when it idles again, later than the first time.
    let again = agent
        .call("create_invoice", invoice("idle-co"), json!({}))
        .await;
    assert_eq!(execution(&again)["attempt"], "recovered", "{again}");
    eventually("the resumed run's call and its second expiry", || {
        shown = show(&served, &run);
        calls(&shown).len() == 2
            && shown["end_reason"] == "idle_expired"
            && shown["ended_at"]
                .as_str()
                .is_some_and(|t| t > first_end.as_str())
    })
    .await;
    assert_eq!(
        calls(&shown),
        [
            call("1", "new", &id, "completed"),
            call("2", "recovered", &id, "completed")
        ]
    );
    let runs = operator_json(&served, &["sessions", "list"]);
    let of_billing = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["actor"] == "billing")
        .count();
    assert_eq!(of_billing, 1, "resumed, not a second run: {runs:#}");
}

/// SIGTERM ends the runs the gateway served as `gateway_stopped`; after a restart on the same
/// store and port, the client's next call on its session resumes the run, and its `DELETE`
/// then ends it as `closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_sessions_a_gateway_stop_ends_its_runs() {
    let mut s = setup("inv-stopped").await;
    let agent = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let run = agent.run_id();
    let first = agent
        .call("create_invoice", invoice("stop-co"), json!({}))
        .await;
    let id = execution_id(&first);
    let status = s.served.terminate();
    assert!(status.success(), "{status}");

    let addr = s.served.addr().to_string();
    let restarted = Served::spawn(&s.dir.0, &addr);
    let shown = show(&restarted, &run);
    assert_run(
        &shown,
        &run,
        "streamable-http",
        "postern-tests",
        Some("gateway_stopped"),
    );
    assert_eq!(calls(&shown), [call("1", "new", &id, "completed")]);

    let again = agent
        .call("create_invoice", invoice("stop-co"), json!({}))
        .await;
    assert_eq!(execution_id(&again), id, "{again}");
    let mut shown = Value::Null;
    eventually("the resumed run's second call", || {
        shown = show(&restarted, &run);
        calls(&shown).len() == 2
    })
    .await;
    assert_run(&shown, &run, "streamable-http", "postern-tests", None);
    assert_eq!(
        calls(&shown),
        [
            call("1", "new", &id, "completed"),
            call("2", "recovered", &id, "completed")
        ]
    );
    let closed = agent.close().await;
    assert!((200..300).contains(&closed), "DELETE answered {closed}");
    eventually("the resumed run's end", || {
        show(&restarted, &run)["end_reason"] == "closed"
    })
    .await;
    assert_eq!(posts(&s.target.state), 1);
}

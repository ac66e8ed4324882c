//! Issue 17, end to end: the seed's incidents reproduced against a real `postern serve` and the
//! real invoice API, each investigated with `postern activity trace EXE --json`. The tests read
//! the five answers' facts — which runs, how many dispatches, what the target said and how it
//! was learnt, which deliveries were lost, how every later call related to the execution — from
//! the sentences and from their evidence, and check them against what the test did.
//!
//! The Sessions log's ends (every way a run can end) are in `investigate/sessions.rs`.

use std::path::Path;
use std::time::Duration;

use postern_demo::target::Mode;
use serde_json::{json, Value};

use crate::harness::{
    activity, config, execution, execution_id, operator, posts, Mcp, Setup, BILLING_TOKEN,
};

mod sessions;

/// The harness config with operator alice (who resolves reviews and reads the Sessions log),
/// a tool with a one-second match window and one whose target refuses connections.
fn with_operator(target: &str) -> String {
    format!(
        r#"{}
[[operator]]
name = "alice"
token = {{ file = "alice.token" }}

[[tool]]
name = "create_invoice_briefly"
description = "Create an invoice (identical calls match for one second)"
class = "idempotent_write"
match_window = "1s"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[tool]]
name = "create_invoice_nowhere"
description = "Create an invoice at a target that refuses connections"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "http://127.0.0.1:9/invoices", connect_timeout = "1s" }}
"#,
        config(target)
    )
}

async fn setup(tag: &str) -> Setup {
    Setup::start(tag, with_operator).await
}

fn invoice(customer: &str) -> Value {
    json!({"customer": customer, "amount": 250})
}

/// `postern activity trace <args> --json`, polled until `done` holds: calls and deliveries are
/// records nothing waits for, committed a moment after the answer.
async fn trace_when(dir: &Path, args: &[&str], what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..100 {
        last = activity(dir, &[&["trace"], args].concat());
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}; the last trace:\n{last:#}");
}

/// Answer `q` (1 to 5): its sentence.
fn answer(t: &Value, q: usize) -> &str {
    assert_eq!(t["answers"].as_array().map(Vec::len), Some(5), "{t:#}");
    t["answers"][q - 1]["answer"].as_str().unwrap()
}

/// Answer `q`'s evidence.
fn evidence(t: &Value, q: usize) -> &[Value] {
    t["answers"][q - 1]["evidence"].as_array().unwrap()
}

/// The `what` of answer `q`'s evidence items carrying lifecycle event numbers, in order.
fn event_evidence(t: &Value, q: usize) -> Vec<&str> {
    evidence(t, q)
        .iter()
        .filter(|e| e["event"].is_u64())
        .map(|e| e["what"].as_str().unwrap())
        .collect()
}

/// The calls of the calls log answer 5 shows: (run, JSON-RPC id, attempt), oldest first.
fn calls(t: &Value) -> Vec<(String, String, String)> {
    evidence(t, 5)
        .iter()
        .filter(|e| e["what"].as_str().unwrap().starts_with("call of "))
        .map(|e| {
            let what = e["what"].as_str().unwrap();
            let attempt = what[what.find('(').unwrap() + 1..what.find(')').unwrap()].to_string();
            (
                e["run_id"].as_str().unwrap_or("-").to_string(),
                e["request_id"].as_str().unwrap_or("-").to_string(),
                attempt,
            )
        })
        .collect()
}

/// The distinct runs answer 1 names in its evidence.
fn runs_named(t: &Value) -> Vec<String> {
    let mut runs: Vec<String> = evidence(t, 1)
        .iter()
        .filter(|e| e["what"].as_str().unwrap().starts_with("run "))
        .map(|e| e["run_id"].as_str().unwrap().to_string())
        .collect();
    runs.sort();
    runs.dedup();
    runs
}

fn executions(dir: &Path) -> Vec<String> {
    activity(dir, &["list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap().to_string())
        .collect()
}

fn has_event(t: &Value, q: usize, name: &str) -> bool {
    event_evidence(t, q).contains(&name)
}

/// (a) The answer is lost after the target committed (the client cut its connection while
/// the target was still working); the same agent process retries with a new JSON-RPC id and
/// is answered from the record. One process, one dispatch, the answer lost then delivered,
/// the retry recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_a_lost_answer_after_commit() {
    let s = setup("inv-lost").await;
    s.target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_millis(800)));
    let agent = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let req = agent.request("create_invoice", invoice("lost-co"), json!({}));
    assert!(agent
        .raw(&req, Some(Duration::from_millis(300)))
        .await
        .is_err());
    let target = s.target.state.clone();
    crate::harness::eventually("the call to reach the target", || posts(&target) == 1).await;
    let ids = executions(&s.dir.0);
    assert_eq!(ids.len(), 1);
    let id = ids[0].clone();
    // The lost delivery is recorded once the target's answer is.
    trace_when(&s.dir.0, &[&id], "the lost delivery", |t| {
        has_event(t, 4, "delivery_failed")
    })
    .await;

    let again = agent
        .call("create_invoice", invoice("lost-co"), json!({}))
        .await;
    assert_eq!(execution_id(&again), id, "{again}");
    assert_eq!(execution(&again)["attempt"], "recovered", "{again}");
    assert_eq!(posts(&s.target.state), 1, "one invoice");

    let t = trace_when(&s.dir.0, &[&id], "the retry's call and delivery", |t| {
        calls(t).len() == 2 && has_event(t, 4, "delivered")
    })
    .await;
    let run = agent.run_id();
    assert_eq!(t["execution_id"], id.as_str());
    assert_eq!(t["state"], "delivered(applied)");

    // 1. One agent process: the run of the session, named with its client.
    let a1 = answer(&t, 1);
    assert!(
        a1.starts_with(&format!(
            "One agent process (one run): every call that reached this execution came from run {run} (client postern-tests "
        )),
        "{a1}"
    );
    assert_eq!(runs_named(&t), std::slice::from_ref(&run));
    assert!(
        !a1.contains("also has execution"),
        "no other execution: {a1}"
    );

    // 2. Authorized by policy, dispatched once.
    let a2 = answer(&t, 2);
    assert!(a2.contains("Authorized by policy"), "{a2}");
    assert!(a2.contains("Dispatched once"), "{a2}");
    assert_eq!(
        event_evidence(&t, 2)
            .iter()
            .filter(|w| **w == "dispatched")
            .count(),
        1
    );

    // 3. The target answered 201: applied.
    let a3 = answer(&t, 3);
    assert!(a3.contains("answered status 201"), "{a3}");
    assert!(a3.contains("applied"), "{a3}");
    assert!(!a3.contains("unknown"), "{a3}");

    // 4. Lost after completion, then delivered to the retry, in that order.
    let a4 = answer(&t, 4);
    assert!(a4.starts_with("Yes:"), "{a4}");
    assert!(a4.contains("(1 lost delivery)"), "{a4}");
    assert!(a4.contains("delivered later"), "{a4}");
    assert_eq!(event_evidence(&t, 4), ["delivery_failed", "delivered"]);
    let at = |w: &str| {
        evidence(&t, 4).iter().find(|e| e["what"] == w).unwrap()["at"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(at("delivery_failed") <= at("delivered"));

    // 5. Both calls from the one run: the first created it, the retry (JSON-RPC id 2) was
    // answered from the record.
    assert_eq!(
        calls(&t),
        [
            (run.clone(), "1".into(), "new".into()),
            (run.clone(), "2".into(), "recovered".into())
        ]
    );
    let a5 = answer(&t, 5);
    assert!(
        a5.contains(&format!(
            "(run {run}, JSON-RPC id 2) reused this execution and was answered from its record (recovered), nothing was sent for it; it was told completed"
        )),
        "{a5}"
    );
    assert!(!a5.contains("separate attempt"), "{a5}");
}

/// (b) Two agent processes (two MCP sessions) send the same arguments; the second arrives
/// while the first is in flight and attaches. One execution, two runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_two_agent_processes_with_the_same_arguments() {
    let s = setup("inv-two").await;
    s.target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_millis(2500)));
    let a = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let b = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let target = s.target.state.clone();
    let first = tokio::spawn(async move {
        let r = a
            .call("create_invoice", invoice("twice-co"), json!({}))
            .await;
        (a, r)
    });
    crate::harness::eventually("the first call to reach the target", || posts(&target) == 1).await;
    let second = b
        .call("create_invoice", invoice("twice-co"), json!({}))
        .await;
    let (a, first) = first.await.unwrap();
    let id = execution_id(&first);
    assert_eq!(execution_id(&second), id, "{second}");
    assert_eq!(execution(&first)["attempt"], "new");
    assert_eq!(execution(&second)["attempt"], "attached", "{second}");
    assert_eq!(posts(&s.target.state), 1);
    assert_eq!(executions(&s.dir.0), std::slice::from_ref(&id));

    // The deliveries ride the next commit, like the calls log: read once both are recorded.
    let t = trace_when(&s.dir.0, &[&id], "both calls and their deliveries", |t| {
        calls(t).len() == 2 && has_event(t, 4, "delivered")
    })
    .await;
    let (run_a, run_b) = (a.run_id(), b.run_id());
    let mut both = vec![run_a.clone(), run_b.clone()];
    both.sort();

    // 1. Two processes, one execution.
    let a1 = answer(&t, 1);
    assert!(
        a1.starts_with("2 runs, so 2 agent processes as far as the gateway can tell"),
        "{a1}"
    );
    assert!(a1.contains(&run_a) && a1.contains(&run_b), "{a1}");
    // Both sessions named the harness's client: the answer says what that cannot tell apart.
    assert!(
        a1.contains("All name the same client (postern-tests ")
            && a1.contains("the record cannot tell which"),
        "{a1}"
    );
    assert_eq!(runs_named(&t), both);
    assert!(!a1.contains("also has execution"), "{a1}");

    // 2, 3, 4: sent once, applied, delivered (to both callers) with nothing lost.
    let a2 = answer(&t, 2);
    assert!(a2.contains("Dispatched once"), "{a2}");
    assert!(
        answer(&t, 3).contains("answered status 201"),
        "{}",
        answer(&t, 3)
    );
    let a4 = answer(&t, 4);
    assert!(a4.starts_with("No: the answer was delivered"), "{a4}");
    assert!(!has_event(&t, 4, "delivery_failed"));

    // 5. The second process's call attached to the first's execution.
    let seen = calls(&t);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.contains(&(run_a.clone(), "1".into(), "new".into())),
        "{seen:?}"
    );
    assert!(
        seen.contains(&(run_b.clone(), "1".into(), "attached".into())),
        "{seen:?}"
    );
    let a5 = answer(&t, 5);
    assert!(a5.contains(&format!("run {run_b}")), "{a5}");
    assert!(a5.contains("(attached)"), "{a5}");
    assert!(!a5.contains("separate attempt"), "{a5}");
}

/// (c) A retry with a new operation key is a new action: two executions, two invoices, and
/// every view says why they are separate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_a_retry_with_a_new_key() {
    let s = setup("inv-key").await;
    let agent = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let first = agent
        .call(
            "create_invoice",
            invoice("keyed-co"),
            json!({"idempotencyKey": "order-1"}),
        )
        .await;
    let second = agent
        .call(
            "create_invoice",
            invoice("keyed-co"),
            json!({"idempotencyKey": "order-2"}),
        )
        .await;
    let (id1, id2) = (execution_id(&first), execution_id(&second));
    assert_ne!(id1, id2);
    assert_eq!(execution(&second)["attempt"], "new");
    assert_eq!(s.target.state.count_for("keyed-co"), 2, "two invoices");

    // The delivery is recorded after the answer left (it rides the next commit): wait for it.
    let t = trace_when(&s.dir.0, &[&id2], "the second call and its delivery", |t| {
        calls(t).len() == 1 && answer(t, 4).starts_with("No: the answer was delivered")
    })
    .await;
    let fingerprint = t["fingerprint"].as_str().unwrap().to_string();
    // 1. One process; the same intent has another execution, named.
    let a1 = answer(&t, 1);
    assert!(a1.starts_with("One agent process (one run)"), "{a1}");
    assert!(a1.contains(&format!("also has execution(s) {id1}")), "{a1}");
    assert!(answer(&t, 2).contains("Dispatched once"));
    assert!(answer(&t, 3).contains("answered status 201"));
    assert!(answer(&t, 4).starts_with("No: the answer was delivered"));
    // 5. Its one call created it; the other execution is separate because of the new key.
    assert_eq!(
        calls(&t),
        [(agent.run_id(), "2".into(), "new".into())],
        "{t:#}"
    );
    let a5 = answer(&t, 5);
    assert!(a5.contains("No later call reached it"), "{a5}");
    assert!(
        a5.contains(&format!("Execution {id1}"))
            && a5
                .contains("separate attempt: the later call carried a new operation key (order-2)"),
        "{a5}"
    );
    let separate: Vec<&Value> = evidence(&t, 5)
        .iter()
        .filter(|e| {
            e["what"]
                .as_str()
                .unwrap()
                .starts_with("separate execution")
        })
        .collect();
    assert_eq!(separate.len(), 1, "{t:#}");
    assert_eq!(separate[0]["execution_id"], id1.as_str());
    assert_eq!(separate[0]["operation_key"], "order-1");

    // The first execution's trace says the same of the second.
    let t1 = activity(&s.dir.0, &["trace", &id1]);
    assert!(
        answer(&t1, 5).contains(&format!("Execution {id2} (delivered(applied), accepted"))
            && answer(&t1, 5).contains("a new operation key (order-2)"),
        "{}",
        answer(&t1, 5)
    );

    // Side by side, by key and by fingerprint: oldest first, the second separate by its key.
    let side_by_side = |rows: &Value| {
        let rows = rows.as_array().unwrap();
        let ids: Vec<&str> = rows
            .iter()
            .map(|r| r["execution_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [id1.as_str(), id2.as_str()], "{rows:?}");
        assert!(rows[0]["separate_because"].is_null());
        assert_eq!(rows[0]["operation_key"], "order-1");
        assert_eq!(rows[1]["operation_key"], "order-2");
        assert!(rows[1]["separate_because"]
            .as_str()
            .unwrap()
            .contains("new operation key (order-2)"));
        for r in rows {
            assert_eq!(r["dispatches"], 1);
            assert_eq!(r["fingerprint"], fingerprint.as_str());
        }
    };
    side_by_side(&activity(
        &s.dir.0,
        &["trace", "--key", "order-2", "--actor", "billing"],
    ));
    side_by_side(&activity(
        &s.dir.0,
        &["trace", "--fingerprint", &fingerprint],
    ));
    // A key another actor used finds nothing of billing's.
    let store = format!("sqlite://{}", s.dir.0.join("ledger.db").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["activity", "trace", "--key", "order-2", "--actor", "ops"])
        .args(["--store", &store])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no execution of that key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (d) The target applied the invoice and never answered (outcome unknown); the retry's status
/// query finds it: the same execution, applied, sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_an_unknown_outcome_settled_by_a_status_query() {
    let s = setup("inv-status").await;
    s.target.state.set_mode(Mode::HangOnce);
    let agent = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let first = agent
        .call("create_invoice", invoice("unknown-co"), json!({}))
        .await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let id = execution_id(&first);
    let again = agent
        .call("create_invoice", invoice("unknown-co"), json!({}))
        .await;
    assert_eq!(execution_id(&again), id);
    assert_eq!(execution(&again)["state"], "completed", "{again}");
    assert_eq!(execution(&again)["attempt"], "recovered");
    assert_eq!(posts(&s.target.state), 1, "settled without a second POST");
    assert_eq!(s.target.state.count_for("unknown-co"), 1);

    // Another process only reads the record: it sent no action.
    let reader = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let read = reader
        .call("execution_status", json!({"execution_id": id}), json!({}))
        .await;
    assert_eq!(execution(&read)["state"], "completed", "{read}");

    let t = trace_when(&s.dir.0, &[&id], "the three calls", |t| {
        calls(t).len() == 3 && has_event(t, 4, "delivered")
    })
    .await;
    let a1 = answer(&t, 1);
    assert!(
        a1.starts_with(&format!(
            "One agent process (one run): every call that reached this execution came from run {}",
            agent.run_id()
        )),
        "{a1}"
    );
    assert!(
        a1.contains(&format!(
            "Run(s) {} only read its status (execution_status).",
            reader.run_id()
        )),
        "{a1}"
    );
    assert!(
        answer(&t, 2).contains("Dispatched once"),
        "{}",
        answer(&t, 2)
    );
    // 3. Unknown (the answer never came), then applied, learnt by the status query (200).
    let a3 = answer(&t, 3);
    let unknown = a3
        .find("the outcome became unknown")
        .unwrap_or_else(|| panic!("{a3}"));
    let settled = a3
        .find("The target answered status 200")
        .unwrap_or_else(|| panic!("{a3}"));
    assert!(unknown < settled, "{a3}");
    assert!(a3.contains("learnt by status_query: applied"), "{a3}");
    assert_eq!(
        event_evidence(&t, 3),
        ["outcome_unknown", "completed(applied)"]
    );
    // 4. Nothing completed was lost: the first call was told "unknown", the retry got the
    // applied result.
    let a4 = answer(&t, 4);
    assert!(a4.starts_with("No: the answer was delivered"), "{a4}");
    // 5. The retry settled it by the status query, sending the invoice nothing new.
    assert_eq!(
        calls(&t)
            .iter()
            .map(|c| (c.1.as_str(), c.2.as_str()))
            .collect::<Vec<_>>(),
        [("1", "new"), ("2", "recovered"), ("1", "recovered")]
    );
    let a5 = answer(&t, 5);
    assert!(
        a5.contains(&format!(
            "(run {}, JSON-RPC id 1) read its record with execution_status (told completed): nothing was sent.",
            reader.run_id()
        )),
        "{a5}"
    );
    assert!(
        a5.contains("JSON-RPC id 2) reused this execution (recovered): recovery settled the unknown outcome by asking the target (status_query): it had applied it"),
        "{a5}"
    );
    assert!(
        a5.contains("it had applied it (event 5); it was told completed."),
        "{a5}"
    );
    assert!(!a5.contains("re-sent"), "{a5}");
}

/// (e) An irreversible call's outcome is unknown; the retry puts it in review; operator alice
/// resolves it as applied; the agent's next retry is told so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_a_review_resolved_by_an_operator() {
    let s = setup("inv-review").await;
    s.target.state.set_mode(Mode::HangOnce);
    let agent = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let first = agent.call("send_wire", invoice("wire-co"), json!({})).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let id = execution_id(&first);
    let review = agent.call("send_wire", invoice("wire-co"), json!({})).await;
    assert_eq!(execution(&review)["state"], "needs_review", "{review}");
    let (code, _, err) = operator(
        &s.served,
        &[
            "review",
            "resolve",
            &id,
            "--applied",
            "--reason",
            "the bank shows the transfer",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let told = agent.call("send_wire", invoice("wire-co"), json!({})).await;
    assert_eq!(execution(&told)["state"], "resolved", "{told}");
    assert_eq!(posts(&s.target.state), 1, "never sent again");

    let t = trace_when(&s.dir.0, &[&id], "three calls", |t| calls(t).len() == 3).await;
    assert_eq!(t["state"], "resolved(applied)");
    assert!(
        answer(&t, 2).contains("Dispatched once"),
        "{}",
        answer(&t, 2)
    );
    // 3. Unknown, then review, then alice's resolution: applied, with her reason.
    let a3 = answer(&t, 3);
    let unknown = a3
        .find("outcome became unknown")
        .unwrap_or_else(|| panic!("{a3}"));
    let review = a3
        .find("sent to an operator's review")
        .unwrap_or_else(|| panic!("{a3}"));
    let resolved = a3
        .find("operator alice resolved it: applied")
        .unwrap_or_else(|| panic!("{a3}"));
    assert!(unknown < review && review < resolved, "{a3}");
    assert!(a3.contains("the bank shows the transfer"), "{a3}");
    assert_eq!(
        event_evidence(&t, 3),
        ["outcome_unknown", "review_required", "resolved(applied)"]
    );
    assert!(!a3.contains("The target answered"), "{a3}");
    // 4. No answer of the target was ever lost.
    let a4 = answer(&t, 4);
    assert!(a4.contains("an operator resolved it"), "{a4}");
    assert!(!a4.starts_with("Yes"), "{a4}");
    // 5. The two retries: one found it unknown and sent it to review, one was told alice's
    // resolution; neither sent anything.
    let seen: Vec<(String, String)> = calls(&t)
        .into_iter()
        .map(|(_, id, attempt)| (id, attempt))
        .collect();
    assert_eq!(
        seen,
        [
            ("1".into(), "new".into()),
            ("2".into(), "recovered".into()),
            ("3".into(), "recovered".into())
        ]
    );
    let a5 = answer(&t, 5);
    let second = a5.find("JSON-RPC id 2) reused this execution (recovered): the outcome being unknown, the tool's class sent it to an operator's review instead of sending it again").unwrap_or_else(|| panic!("{a5}"));
    let told_review = a5
        .find("it was told needs_review")
        .unwrap_or_else(|| panic!("{a5}"));
    let third = a5
        .find("JSON-RPC id 3) reused this execution and was answered from its record (recovered), nothing was sent for it; it was told resolved")
        .unwrap_or_else(|| panic!("{a5}"));
    assert!(second < told_review && told_review < third, "{a5}");
}

/// (a), sessionless: a 2026-07-28 client names its run (`_meta["io.postern/run"]`), goes away
/// while the target works (after dispatch: the execution runs on), and re-issues the call under
/// a new JSON-RPC id. Both calls are in the calls log under that run; the answer the first
/// never got is a lost delivery; the re-issue was answered from the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_a_lost_answer_of_a_sessionless_client() {
    let s = setup("inv-sessionless").await;
    s.target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_millis(800)));
    let call = |rpc_id: i64| {
        let body = json!({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {
            "name": "create_invoice",
            "arguments": invoice("sessionless-co"),
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.postern/run": "nightly-agent-7"
            }
        }});
        crate::harness::http_client()
            .post(&s.served.url)
            .bearer_auth(BILLING_TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "create_invoice")
            .body(body.to_string())
            .send()
    };
    let pending = tokio::spawn(call(1));
    let target = s.target.state.clone();
    crate::harness::eventually("the call to reach the target", || posts(&target) == 1).await;
    pending.abort();
    let _ = pending.await;
    let ids = executions(&s.dir.0);
    assert_eq!(ids.len(), 1);
    let id = ids[0].clone();
    trace_when(&s.dir.0, &[&id], "the abandoned call's answer", |t| {
        t["state"] != "dispatched" && calls(t).len() == 1
    })
    .await;

    let again = call(2).await.unwrap().text().await.unwrap();
    let again = crate::harness::sse_message(&again);
    assert_eq!(execution_id(&again), id, "{again}");
    assert_eq!(execution(&again)["attempt"], "recovered", "{again}");
    assert_eq!(posts(&s.target.state), 1);

    let t = trace_when(&s.dir.0, &[&id], "the re-issued call", |t| {
        calls(t).len() == 2 && has_event(t, 4, "delivered")
    })
    .await;
    assert_eq!(
        calls(&t),
        [
            ("billing/nightly-agent-7".into(), "1".into(), "new".into()),
            (
                "billing/nightly-agent-7".into(),
                "2".into(),
                "recovered".into()
            )
        ]
    );
    let a1 = answer(&t, 1);
    assert!(
        a1.starts_with("One agent process (one run): every call that reached this execution came from run billing/nightly-agent-7"),
        "{a1}"
    );
    assert!(answer(&t, 2).contains("Dispatched once"));
    assert!(answer(&t, 3).contains("answered status 201"));
    let a4 = answer(&t, 4);
    assert!(a4.starts_with("Yes:"), "{a4}");
    assert_eq!(event_evidence(&t, 4), ["delivery_failed", "delivered"]);
    assert!(
        answer(&t, 5).contains(
            "JSON-RPC id 2) reused this execution and was answered from its record (recovered)"
        ),
        "{}",
        answer(&t, 5)
    );
}

/// The "why do I have two" view for the other reasons two executions of one intent exist: the
/// second came after the tool's match window, or the first failed (nothing was sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn investigate_why_one_intent_has_two_executions() {
    let s = setup("inv-why-two").await;
    let agent = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let side_by_side = |id: &str| {
        let fp = activity(&s.dir.0, &["trace", id])["fingerprint"]
            .as_str()
            .unwrap()
            .to_string();
        activity(&s.dir.0, &["trace", "--fingerprint", &fp])
    };

    // After the window: two invoices, the second a new action because of the time between.
    let first = agent
        .call("create_invoice_briefly", invoice("window-co"), json!({}))
        .await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let second = agent
        .call("create_invoice_briefly", invoice("window-co"), json!({}))
        .await;
    assert_eq!(execution(&second)["attempt"], "new", "{second}");
    let rows = side_by_side(&execution_id(&second));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["execution_id"], execution_id(&first).as_str());
    let why = rows[1]["separate_because"].as_str().unwrap();
    assert!(
        why.starts_with("the same intent arrived 1.")
            && why.contains("s after the first, outside the tool's match window"),
        "{why}"
    );
    assert_eq!(s.target.state.count_for("window-co"), 2);

    // The first failed (connection refused: nothing sent): the retry is a new execution.
    let failed = agent
        .call("create_invoice_nowhere", invoice("nowhere-co"), json!({}))
        .await;
    assert_eq!(execution(&failed)["state"], "failed", "{failed}");
    let retried = agent
        .call("create_invoice_nowhere", invoice("nowhere-co"), json!({}))
        .await;
    let (id1, id2) = (execution_id(&failed), execution_id(&retried));
    assert_ne!(id1, id2);
    let rows = side_by_side(&id2);
    assert_eq!(
        rows[1]["separate_because"],
        "the earlier one was failed: nothing was performed, so the later call was a new action",
        "{rows:#}"
    );
    let t = trace_when(&s.dir.0, &[&id2], "the retry's call", |t| {
        calls(t).len() == 1
    })
    .await;
    let a3 = answer(&t, 3);
    assert!(
        a3.contains("failed at") && a3.contains("without reaching the target"),
        "{a3}"
    );
    assert!(!a3.contains("answered"), "{a3}");
    assert!(answer(&t, 4).starts_with("No: there was no completed answer to lose"));
    assert!(
        answer(&t, 5).contains(&format!("Execution {id1} (failed, accepted"))
            && answer(&t, 5).contains("is a separate attempt: the earlier one was failed"),
        "{}",
        answer(&t, 5)
    );
}

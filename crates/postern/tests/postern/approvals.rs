//! Human control (issue 14), end to end against a real `postern serve` and the real invoice
//! API: per-use approvals bound to one execution and its fingerprint, decided by an operator
//! through `postern approvals` (the operator API), denial and expiry, a `kill -9` while a call
//! waits, review resolution, and the separation of actor and operator tokens.

use std::process::Command;
use std::time::Duration;

use postern_demo::target::{InvoiceApi, Mode};
use serde_json::{json, Value};

use crate::harness::{
    activity, assert_store_verifies, config, eventually, execution, http_client, operator,
    operator_json, posts, write_private, Dir, Mcp, Served, Setup, ALICE_TOKEN, BILLING_TOKEN,
};

/// The harness config with an operator and two tools that need a per-use approval.
pub(crate) fn approval_config(target: &str) -> String {
    format!(
        r#"{}
[[operator]]
name = "alice"
token = {{ file = "alice.token" }}

[[tool]]
name = "pay_invoice"
description = "Pay an invoice (every call approved by an operator)"
class = "idempotent_write"
match_window = "10m"
approval = "every_call"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}
recovery = {{ status_query = {{ method = "GET", url = "{target}/invoices?idempotency_key={{execution_id}}" }} }}

[[tool]]
name = "pay_narrow_window"
description = "Pay an invoice (a one-second match window, approved by an operator)"
class = "idempotent_write"
match_window = "1s"
approval = "every_call"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[tool]]
name = "pay_traced"
description = "Pay an invoice (approved by an operator; trace_id is sent but not fingerprinted)"
class = "idempotent_write"
match_window = "10m"
approval = "every_call"
non_semantic = ["trace_id"]
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }}, trace_id = {{ type = "string" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[tool]]
name = "pay_quickly"
description = "Pay an invoice (the approval must come within a second)"
class = "idempotent_write"
match_window = "10m"
approval = "every_call"
approval_ttl = "1s"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}
"#,
        config(target)
    )
}

async fn setup(tag: &str) -> Setup {
    Setup::start(tag, approval_config).await
}

fn events(dir: &Dir, id: &str) -> Vec<Value> {
    activity(&dir.0, &["show", id])["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn names(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn pay(customer: &str, amount: i64) -> Value {
    json!({"customer": customer, "amount": amount})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_one_approval_and_is_sent_once_approved() {
    let s = setup("approve").await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let first = mcp.call("pay_invoice", pay("appr-co", 5), json!({})).await;
    let ex = execution(&first);
    assert_eq!(ex["state"], "awaiting_approval", "{first}");
    assert_eq!(first["result"]["isError"], false, "{first}");
    assert!(ex["decision"]["expires_at"].is_string(), "{first}");
    assert!(ex["next_step"]
        .as_str()
        .unwrap()
        .contains("nothing has been sent"));
    let id = ex["execution_id"].as_str().unwrap().to_string();
    assert_eq!(posts(&s.target.state), 0);

    // Five identical retries: the same execution, the same pending request.
    for _ in 0..5 {
        let again = mcp.call("pay_invoice", pay("appr-co", 5), json!({})).await;
        assert_eq!(execution(&again)["execution_id"], id.as_str(), "{again}");
        assert_eq!(execution(&again)["state"], "awaiting_approval");
        assert_eq!(execution(&again)["attempt"], "recovered");
    }
    let listed = operator_json(&s.served, &["approvals", "list"]);
    let pending = listed["approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{listed}");
    assert_eq!(pending[0]["execution_id"], id.as_str());
    assert_eq!(pending[0]["record"]["arguments"]["customer"], "appr-co");
    let (code, shown, err) = operator(&s.served, &["approvals", "show", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(
        shown.contains("appr-co") && shown.contains("awaiting_approval"),
        "{shown}"
    );
    assert_eq!(
        posts(&s.target.state),
        0,
        "nothing is sent before the approval"
    );

    let (code, out, err) = operator(
        &s.served,
        &["approvals", "approve", &id, "--reason", "ticket 42"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("approved"), "{out}");
    eventually("the approved call reaches the target", || {
        posts(&s.target.state) == 1
    })
    .await;
    let seen = s.target.state.requests();
    assert_eq!(
        seen.last().unwrap().idempotency_key.as_deref(),
        Some(id.as_str())
    );

    // The agent's identical call gets the result; nothing is sent again.
    let done = mcp.call("pay_invoice", pay("appr-co", 5), json!({})).await;
    assert_eq!(execution(&done)["state"], "completed", "{done}");
    assert_eq!(execution(&done)["execution_id"], id.as_str());
    assert_eq!(execution(&done)["decision"]["by"], "alice", "{done}");
    assert_eq!(posts(&s.target.state), 1);
    let evs = events(&s.dir, &id);
    let got = names(&evs);
    assert_eq!(
        &got[..5],
        [
            "accepted",
            "approval_requested",
            "authorized",
            "dispatched",
            "completed(applied)"
        ],
        "{got:?}"
    );
    assert_eq!(evs[2]["detail"]["approved_by"], "alice");
    assert_eq!(evs[2]["detail"]["reason"], "ticket 42");

    // Single use: a second approval is refused, naming the first.
    let (code, _, err) = operator(&s.served, &["approvals", "approve", &id]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already decided (approved) by alice"), "{err}");

    // Other arguments are another execution with its own request; a fingerprint other than
    // the execution's is never approved.
    let other = mcp.call("pay_invoice", pay("appr-co", 6), json!({})).await;
    let other_id = execution(&other)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(other_id, id);
    assert_eq!(execution(&other)["state"], "awaiting_approval");
    let wrong = http_client()
        .post(format!("{}/approve", approval_url(&s.served, &other_id)))
        .bearer_auth(ALICE_TOKEN)
        .json(&json!({"fingerprint": format!("hmac-sha256:{}", "0".repeat(64))}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 409);
    assert!(wrong
        .text()
        .await
        .unwrap()
        .contains("not the arguments shown"));
    // The CLI binds an approval to the fingerprint an operator saw earlier, too.
    let stale = format!("hmac-sha256:{}", "1".repeat(64));
    let (code, _, err) = operator(
        &s.served,
        &["approvals", "approve", &other_id, "--fingerprint", &stale],
    );
    assert_eq!(code, 2);
    assert!(err.contains("not the arguments shown"), "{err}");
    assert_eq!(posts(&s.target.state), 1);

    // The chain verifies, the operator's decision in it.
    assert_store_verifies(&s.dir.0, &s.served);
}

fn approval_url(served: &Served, id: &str) -> String {
    format!("{}/ops/approvals/{id}", served.url.trim_end_matches("/mcp"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_final_and_an_unanswered_request_expires() {
    let s = setup("deny").await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let first = mcp.call("pay_invoice", pay("deny-co", 9), json!({})).await;
    let id = execution(&first)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _, err) = operator(
        &s.served,
        &["approvals", "deny", &id, "--reason", "not budgeted"],
    );
    assert_eq!(code, 0, "{err}");
    let again = mcp.call("pay_invoice", pay("deny-co", 9), json!({})).await;
    let ex = execution(&again);
    assert_eq!(ex["state"], "denied", "{again}");
    assert_eq!(ex["execution_id"], id.as_str());
    assert_eq!(ex["decision"]["by"], "alice");
    assert_eq!(ex["decision"]["reason"], "not budgeted");
    assert!(ex["next_step"]
        .as_str()
        .unwrap()
        .contains("new idempotency key (params.idempotencyKey"));
    let (code, _, err) = operator(&s.served, &["approvals", "approve", &id]);
    assert_eq!(code, 2);
    assert!(err.contains("already decided (denied) by alice"), "{err}");

    // Within a second or never: expired, recorded denied with reason `expired`.
    let quick = mcp.call("pay_quickly", pay("late-co", 1), json!({})).await;
    let quick_id = execution(&quick)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let late = operator_json(&s.served, &["approvals", "show", &quick_id]);
    assert_eq!(late["state"], "denied", "{late}");
    assert_eq!(late["decided"]["reason"], "expired");
    assert!(late["decided"]["by"].is_null());
    let (code, _, err) = operator(&s.served, &["approvals", "approve", &quick_id]);
    assert_eq!(code, 2);
    assert!(err.contains("nobody (expired)"), "{err}");
    assert_eq!(
        posts(&s.target.state),
        0,
        "nothing denied or expired was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_request_survives_kill_9_and_is_still_approvable() {
    let s = setup("approve-crash").await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let first = mcp.call("pay_invoice", pay("crash-co", 3), json!({})).await;
    let id = execution(&first)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let listen = s.served.addr().to_string();
    s.served.kill9();
    let served = Served::spawn(&s.dir.0, &listen);
    let listed = operator_json(&served, &["approvals", "list"]);
    assert_eq!(
        listed["approvals"][0]["execution_id"],
        id.as_str(),
        "{listed}"
    );
    let (code, _, err) = operator(&served, &["approvals", "approve", &id]);
    assert_eq!(code, 0, "{err}");
    // The restarted gateway no longer holds the arguments: the execution is authorized and
    // the agent's identical call sends it, once.
    let shown = operator_json(&served, &["approvals", "show", &id]);
    assert_eq!(shown["state"], "authorized", "{shown}");
    assert_eq!(posts(&s.target.state), 0);
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let done = mcp.call("pay_invoice", pay("crash-co", 3), json!({})).await;
    assert_eq!(execution(&done)["state"], "completed", "{done}");
    assert_eq!(execution(&done)["execution_id"], id.as_str());
    assert_eq!(posts(&s.target.state), 1);
    // A retry of a pending call after the restart hands its arguments back: approved, it is
    // sent at once.
    let second = mcp.call("pay_invoice", pay("crash-co", 4), json!({})).await;
    let second_id = execution(&second)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let listen = served.addr().to_string();
    served.kill9();
    let served = Served::spawn(&s.dir.0, &listen);
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let retry = mcp.call("pay_invoice", pay("crash-co", 4), json!({})).await;
    assert_eq!(execution(&retry)["execution_id"], second_id.as_str());
    let (code, _, err) = operator(&served, &["approvals", "approve", &second_id]);
    assert_eq!(code, 0, "{err}");
    eventually("the retried call is sent on approval", || {
        posts(&s.target.state) == 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_resolves_a_review_and_the_retry_is_told() {
    let s = setup("review").await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    s.target.state.set_mode(Mode::HangOnce);
    let first = mcp.call("send_wire", pay("wire-co", 500), json!({})).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let id = execution(&first)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let review = mcp.call("send_wire", pay("wire-co", 500), json!({})).await;
    assert_eq!(execution(&review)["state"], "needs_review", "{review}");
    let listed = operator_json(&s.served, &["review", "list"]);
    assert_eq!(
        listed["reviews"][0]["execution_id"],
        id.as_str(),
        "{listed}"
    );

    let (code, _, err) = operator(&s.served, &["review", "resolve", &id, "--not-applied"]);
    assert_ne!(code, 0, "a resolution without a reason: {err}");
    let (code, out, err) = operator(
        &s.served,
        &[
            "review",
            "resolve",
            &id,
            "--not-applied",
            "--reason",
            "the bank has no such transfer",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("not_applied"), "{out}");
    let told = mcp.call("send_wire", pay("wire-co", 500), json!({})).await;
    let ex = execution(&told);
    assert_eq!(ex["state"], "resolved", "{told}");
    assert_eq!(ex["outcome"], "not_applied");
    assert_eq!(ex["execution_id"], id.as_str());
    assert_eq!(ex["decision"]["by"], "alice");
    assert!(ex["next_step"]
        .as_str()
        .unwrap()
        .contains("new idempotency key (params.idempotencyKey"));
    let (code, _, err) = operator(
        &s.served,
        &[
            "review",
            "resolve",
            &id,
            "--applied",
            "--reason",
            "changed my mind",
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("already resolved"), "{err}");
    let evs = events(&s.dir, &id);
    let last = evs.last().unwrap();
    assert_eq!(last["event"], "resolved(not_applied)", "{evs:?}");
    assert_eq!(last["detail"]["resolved_by"], "alice");
    assert_store_verifies(&s.dir.0, &s.served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_and_operator_tokens_do_not_cross() {
    let s = setup("ops-tokens").await;
    let base = s.served.url.trim_end_matches("/mcp").to_string();
    let get = |token: Option<&'static str>| {
        let mut req = http_client().get(format!("{base}/ops/approvals"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    assert_eq!(
        get(Some(BILLING_TOKEN)).await.unwrap().status().as_u16(),
        403
    );
    assert_eq!(get(None).await.unwrap().status().as_u16(), 401);
    assert_eq!(
        get(Some("not-a-token-at-all-xxxx"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    assert_eq!(get(Some(ALICE_TOKEN)).await.unwrap().status().as_u16(), 200);
    // An operator's token opens no MCP session, so it can call no tool.
    let refused = crate::harness::http_client()
        .post(&s.served.url)
        .bearer_auth(ALICE_TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    // The CLI refuses to run without a token, and says where it goes.
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["approvals", "list", "--gateway", &s.served.url])
        .env_remove("POSTERN_OPERATOR_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("POSTERN_OPERATOR_TOKEN"));
}

#[test]
fn an_approval_nobody_could_give_is_refused_at_start_up() {
    let dir = Dir::new("approval-no-operator");
    let text = approval_config("http://127.0.0.1:9");
    let start = text.find("[[operator]]").unwrap();
    let end = text.find("[[tool]]\nname = \"pay_invoice\"").unwrap();
    let text = format!("{}{}", &text[..start], &text[end..]);
    crate::harness::prepare(&dir.0, &text);
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(err.contains("no [[operator]] is declared"), "{err}");
}

pub(crate) const ROBOT_TOKEN: &str = "robot-actor-token-0123456789ab";

/// The approval config plus actor robot, whose every run an operator (alice) authorizes.
async fn with_robot(tag: &str) -> (postern_demo::target::InvoiceApiHandle, Dir, Served) {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new(tag);
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    write_private(&dir.0.join("robot.token"), ROBOT_TOKEN);
    let text = format!(
        "{}\n[[actor]]\nname = \"robot\"\ntoken = {{ file = \"robot.token\" }}\nsession_approval = \"required\"\n",
        approval_config(&format!("http://{}", target.addr))
    );
    let served = Served::start(&dir.0, &text);
    (target, dir, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_authorized_once_and_a_revoked_run_stops() {
    let (target, dir, served) = with_robot("sessions").await;
    let run_a = Mcp::connect(&served.url, ROBOT_TOKEN).await;
    let first = run_a
        .call("create_invoice", pay("run-a-1", 1), json!({}))
        .await;
    let ex = execution(&first);
    assert_eq!(ex["state"], "awaiting_approval", "{first}");
    let run_id = ex["decision"]["waits_for_run"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(run_id.starts_with("mcp-session:"), "{first}");
    let first_id = ex["execution_id"].as_str().unwrap().to_string();
    assert_eq!(posts(&target.state), 0);
    let runs = operator_json(&served, &["sessions", "list"]);
    let listed = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id.as_str())
        .unwrap_or_else(|| panic!("{runs}"))
        .clone();
    assert_eq!(listed["authorization"], "pending");
    // A call that waits for its run is not approved one by one.
    let (code, _, err) = operator(&served, &["approvals", "approve", &first_id]);
    assert_eq!(code, 2);
    assert!(err.contains("waits for its run"), "{err}");

    let (code, _, err) = operator(&served, &["sessions", "authorize", &run_id]);
    assert_eq!(code, 0, "{err}");
    eventually(
        "the waiting call is sent once its run is authorized",
        || posts(&target.state) == 1,
    )
    .await;
    // Later calls of the run go straight on.
    let second = run_a
        .call("create_invoice", pay("run-a-2", 2), json!({}))
        .await;
    assert_eq!(execution(&second)["state"], "completed", "{second}");
    assert_eq!(execution(&second)["attempt"], "new");
    assert_eq!(posts(&target.state), 2);
    let (code, _, err) = operator(&served, &["sessions", "authorize", &run_id]);
    assert_eq!(code, 2);
    assert!(err.contains("already authorized by alice"), "{err}");
    let evs = events(&dir, &first_id);
    assert!(
        evs.iter()
            .any(|e| e["event"] == "authorized" && e["detail"]["run_authorized_by"] == "alice"),
        "{evs:?}"
    );

    // A new run waits again; revoking it denies its waiting call.
    let run_b = Mcp::connect(&served.url, ROBOT_TOKEN).await;
    let waiting = run_b
        .call("create_invoice", pay("run-b-1", 3), json!({}))
        .await;
    assert_eq!(
        execution(&waiting)["state"],
        "awaiting_approval",
        "{waiting}"
    );
    let b_id = execution(&waiting)["decision"]["waits_for_run"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(b_id, run_id);
    let (code, _, err) = operator(&served, &["sessions", "revoke", &b_id]);
    assert_eq!(code, 0, "{err}");
    let denied = run_b
        .call("create_invoice", pay("run-b-1", 3), json!({}))
        .await;
    assert_eq!(denied["error"]["code"], -32011, "{denied}");
    // Revoking the authorized run stops its next call, before anything is recorded or sent.
    let (code, _, err) = operator(&served, &["sessions", "revoke", &run_id]);
    assert_eq!(code, 0, "{err}");
    let stopped = run_a
        .call("create_invoice", pay("run-a-3", 4), json!({}))
        .await;
    assert_eq!(stopped["error"]["code"], -32011, "{stopped}");
    assert!(stopped["error"]["message"]
        .as_str()
        .unwrap()
        .contains("revoked by alice"));
    assert_eq!(posts(&target.state), 2);
    let b_exe = execution(&waiting)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = operator_json(&served, &["approvals", "show", &b_exe]);
    assert_eq!(shown["state"], "denied", "{shown}");
    // Actors without session_approval = "required" never wait.
    let billing = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let plain = billing
        .call("create_invoice", pay("billing-co", 5), json!({}))
        .await;
    assert_eq!(execution(&plain)["state"], "completed", "{plain}");
    // A closed session is an ended run in the Sessions log.
    let closed = run_a.close().await;
    assert!((200..300).contains(&closed), "DELETE answered {closed}");
    let runs = operator_json(&served, &["sessions", "list"]);
    let a = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id.as_str())
        .unwrap()
        .clone();
    assert!(a["ended_at"].is_string(), "{a}");
    assert_eq!(a["authorization"], "revoked");
}

/// A retry after the match window, while the call still waits, is the same execution: never a
/// second approval request (the window bounds matching of decided calls, not pending ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_window_still_finds_the_pending_request() {
    let s = setup("approve-window").await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let first = mcp
        .call("pay_narrow_window", pay("window-co", 2), json!({}))
        .await;
    let id = execution(&first)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = mcp
        .call("pay_narrow_window", pay("window-co", 2), json!({}))
        .await;
    assert_eq!(execution(&again)["execution_id"], id.as_str(), "{again}");
    assert_eq!(execution(&again)["state"], "awaiting_approval");
    let listed = operator_json(&s.served, &["approvals", "list"]);
    assert_eq!(listed["approvals"].as_array().unwrap().len(), 1, "{listed}");
}

/// Issue 33, point 6: the approver sees the request that will be sent — every argument,
/// non-semantic ones (outside the record and its fingerprint) marked as such — on the console
/// page, in `approvals show` and in the webhook's payload (the same `PendingDecision`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_sees_non_semantic_fields_that_will_be_sent() {
    let s = setup("approve-traced").await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let args = json!({"customer": "traced-co", "amount": 7, "trace_id": "trace-4f1e"});
    let first = mcp.call("pay_traced", args, json!({})).await;
    let id = execution(&first)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = operator_json(&s.served, &["approvals", "show", &id]);
    assert!(
        shown["record"]["arguments"].get("trace_id").is_none(),
        "{shown}"
    );
    assert_eq!(
        shown["request"]["arguments"]["trace_id"], "trace-4f1e",
        "{shown}"
    );
    assert_eq!(
        shown["request"]["non_semantic"],
        json!(["trace_id"]),
        "{shown}"
    );
    let (code, out, err) = operator(&s.served, &["approvals", "show", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("trace-4f1e"), "{out}");
    assert!(out.contains("non-semantic trace_id"), "{out}");
    // Approved, the request that reaches the target is the one shown.
    let fingerprint = shown["fingerprint"].as_str().unwrap();
    let (code, _, err) = operator(
        &s.served,
        &["approvals", "approve", &id, "--fingerprint", fingerprint],
    );
    assert_eq!(code, 0, "{err}");
    eventually("the approved call is sent", || posts(&s.target.state) == 1).await;
}

/// Issue 33, point 7: a run id is its actor's. Agent B (billing, authorized per call) names a
/// run first; robot (authorized per run) then names the same id: robot's run is its own —
/// waiting for an operator, not refused, not B's — and the Sessions log shows two runs, each
/// under its actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_id_named_by_one_actor_is_not_another_actors_run() {
    let (target, _dir, served) = with_robot("runs-per-actor").await;
    let shared = json!({"_meta": {"io.postern/run": "nightly-deploy-2026-12-03"}});
    let billing = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let squat = billing
        .call("create_invoice", pay("squatter-co", 1), shared.clone())
        .await;
    assert_eq!(execution(&squat)["state"], "completed", "{squat}");
    let robot = Mcp::connect(&served.url, ROBOT_TOKEN).await;
    let own = robot
        .call("create_invoice", pay("robot-co", 2), shared)
        .await;
    assert!(own["error"].is_null(), "robot's run was refused: {own}");
    let ex = execution(&own);
    assert_eq!(ex["state"], "awaiting_approval", "{own}");
    assert_eq!(
        ex["decision"]["waits_for_run"], "robot/nightly-deploy-2026-12-03",
        "{own}"
    );
    let runs = operator_json(&served, &["sessions", "list"]);
    let actor_of = |id: &str| {
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == id)
            .map(|r| r["actor"].clone())
    };
    assert_eq!(
        actor_of("billing/nightly-deploy-2026-12-03"),
        Some(json!("billing")),
        "{runs}"
    );
    assert_eq!(
        actor_of("robot/nightly-deploy-2026-12-03"),
        Some(json!("robot")),
        "{runs}"
    );
    let (code, _, err) = operator(
        &served,
        &["sessions", "authorize", "robot/nightly-deploy-2026-12-03"],
    );
    assert_eq!(code, 0, "{err}");
    eventually("robot's call is sent once its run is authorized", || {
        posts(&target.state) == 2
    })
    .await;
}

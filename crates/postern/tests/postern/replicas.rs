//! Replicas on one PostgreSQL (issue 19), as real `postern serve` processes: a replica paused
//! past its lease (SIGSTOP) is taken over by exactly one survivor, which records its in-flight
//! execution `outcome_unknown` (never released, never re-sent by the scan); the paused replica,
//! once resumed, learns from its heartbeat that it was taken over and stops; the agent's retry
//! on a survivor is recovered by the tool's class, and the target acted once.

use std::time::Duration;

use postern_demo::target::{InvoiceApi, Mode};
use serde_json::{json, Value};
use sqlx::{Connection, Row};

use crate::harness::{
    config, execution, execution_id, fresh_postgres, posts, Dir, Mcp, Served, BILLING_TOKEN,
};

/// The harness config on PostgreSQL with a two-second instance lease, and a tool that waits
/// long for its target (so the call is still in flight when its replica is paused).
pub fn replica_config(target: &postern_demo::target::InvoiceApiHandle, store: &str) -> String {
    let sqlite = "store = \"sqlite://ledger.db\"";
    let text = config(&format!("http://{}", target.addr));
    assert!(text.contains(sqlite));
    format!(
        r#"{}
[[tool]]
name = "create_invoice_patiently"
description = "Create an invoice (waits up to 30 s for the answer)"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "http://{}/invoices", response_timeout = "30s" }}
recovery = {{ status_query = {{ method = "GET", url = "http://{}/invoices?idempotency_key={{execution_id}}" }} }}

[[tool]]
name = "pay_invoice"
description = "Pay an invoice (every call approved by an operator)"
class = "idempotent_write"
match_window = "10m"
approval = "every_call"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "http://{}/invoices", response_timeout = "5s" }}

[[operator]]
name = "alice"
token = {{ file = "alice.token" }}
"#,
        text.replace(
            sqlite,
            &format!(
                "store = \"{store}\"\ninstance_lease = \"2s\"\ntrusted_proxies = [\"{}\"]",
                postern_testkit::balancer::PROXY_SOURCE
            )
        ),
        target.addr,
        target.addr,
        target.addr
    )
}

async fn query(store: &str, sql: &str) -> Vec<sqlx::postgres::PgRow> {
    let mut conn = sqlx::PgConnection::connect(store).await.unwrap();
    sqlx::query(sql).fetch_all(&mut conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_is_taken_over_by_one_survivor_and_stops_when_it_wakes() {
    let target = InvoiceApi::start().await.unwrap();
    let store = fresh_postgres().await;
    let text = replica_config(&target, &store);
    let dirs = [
        Dir::new("replica-a"),
        Dir::new("replica-b"),
        Dir::new("replica-c"),
    ];
    for d in &dirs {
        crate::harness::write_private(&d.0.join("alice.token"), crate::harness::ALICE_TOKEN);
    }
    let mut a = Served::start(&dirs[0].0, &text);
    let b = Served::start(&dirs[1].0, &text);
    let _c = Served::start(&dirs[2].0, &text);

    // A call in flight on A: the target applies it and answers only after 8 s.
    target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_secs(8)));
    let agent = Mcp::connect(&a.url, BILLING_TOKEN).await;
    let args = json!({"customer": "paused-co", "amount": 21});
    let req = agent.request("create_invoice_patiently", args.clone(), json!({}));
    let cut = tokio::spawn(async move {
        let _ = agent.raw(&req, Some(Duration::from_millis(500))).await;
    });
    let state = target.state.clone();
    crate::harness::eventually("the call reaches the target", || posts(&state) == 1).await;
    a.signal("STOP");
    let _ = cut.await;

    // One survivor takes A over within its lease and a scan: the execution is outcome_unknown.
    let mut taken = None;
    for _ in 0..100 {
        let rows = query(&store, "SELECT id, state FROM executions").await;
        assert_eq!(rows.len(), 1);
        if rows[0].get::<String, _>("state") == "outcome_unknown" {
            taken = Some(rows[0].get::<String, _>("id"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let id = taken.expect("a survivor took the paused replica's execution over");
    let events = query(
        &store,
        &format!("SELECT event, detail FROM events WHERE execution_id = '{id}' ORDER BY n"),
    )
    .await;
    let names: Vec<String> = events.iter().map(|r| r.get("event")).collect();
    assert_eq!(
        names,
        ["accepted", "authorized", "dispatched", "outcome_unknown"],
        "never re-sent by the scan"
    );
    let detail: Value = serde_json::from_str(&events[3].get::<String, _>("detail")).unwrap();
    let (owner, taker) = (
        detail["previous_owner"].as_str().unwrap(),
        detail["taken_over_by"].as_str().unwrap(),
    );
    assert_ne!(owner, taker);
    let instances = query(&store, "SELECT id, taken_over_by FROM instances").await;
    let fenced: Vec<(String, Option<String>)> = instances
        .iter()
        .map(|r| (r.get("id"), r.get("taken_over_by")))
        .filter(|(_, by): &(String, Option<String>)| by.is_some())
        .collect();
    assert_eq!(
        fenced,
        [(owner.to_string(), Some(taker.to_string()))],
        "one instance fenced, by one survivor"
    );

    // A wakes: its heartbeat finds it taken over, and it stops (exit 75), dispatching nothing.
    a.signal("CONT");
    let status = a
        .exited_within(Duration::from_secs(10))
        .expect("the taken-over replica stops");
    assert_eq!(status.code(), Some(75), "{status}");

    // The agent retries on a survivor: the same execution, recovered by asking the target.
    let agent = Mcp::connect(&b.url, BILLING_TOKEN).await;
    let again = agent
        .call("create_invoice_patiently", args, json!({}))
        .await;
    assert_eq!(execution_id(&again), id, "{again}");
    assert_eq!(execution(&again)["attempt"], "recovered", "{again}");
    assert_eq!(execution(&again)["state"], "completed", "{again}");
    assert_eq!(posts(&target.state), 1, "the target acted once");
    assert_eq!(target.state.count_for("paused-co"), 1);

    // Issue 47: the taken-over replica's chain ends signed (by its taker, and by itself on
    // the way out), so its tail never becomes unsigned history.
    let chain = query(
        &store,
        &format!("SELECT head_seq, (SELECT MAX(seq) FROM checkpoints k WHERE k.chain = c.chain) AS signed FROM chains c WHERE chain = '{owner}'"),
    )
    .await;
    let (head, signed): (i64, Option<i64>) = (chain[0].get("head_seq"), chain[0].get("signed"));
    assert_eq!(Some(head), signed, "the taken-over chain's head is signed");
}

/// Two replicas behind a real HAProxy, round-robin and sticky by `Mcp-Session-Id`: one MCP
/// session's calls are served whichever replica they land on (its session restored from the
/// store), identical retries match the first execution wherever it was made, and the target
/// acts once per intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_behind_haproxy_match_whichever_replica_they_land_on() {
    use postern_testkit::balancer::{Balance, Haproxy};
    for balance in [Balance::RoundRobin, Balance::StickyBySession] {
        let target = InvoiceApi::start().await.unwrap();
        let store = fresh_postgres().await;
        let text = replica_config(&target, &store);
        let tag = format!("{balance:?}").to_lowercase();
        let dirs = [
            Dir::new(&format!("lb-{tag}-a")),
            Dir::new(&format!("lb-{tag}-b")),
        ];
        for d in &dirs {
            crate::harness::write_private(&d.0.join("alice.token"), crate::harness::ALICE_TOKEN);
        }
        let a = Served::start(&dirs[0].0, &text);
        let b = Served::start(&dirs[1].0, &text);
        let lb = Haproxy::start(&[a.addr(), b.addr()], balance);
        // The agent at 127.0.0.2: HAProxy's PROXY header names it to whichever replica.
        let lb_url = format!("http://{}/mcp", lb.addr);
        let agent = Mcp::connect_from([127, 0, 0, 2], &lb_url, BILLING_TOKEN).await;
        let mut ids = Vec::new();
        for i in 0..4 {
            let args = json!({"customer": format!("lb-{tag}-{i}"), "amount": 10 + i});
            let first = agent.call("create_invoice", args.clone(), json!({})).await;
            assert_eq!(
                execution(&first)["state"],
                "completed",
                "{balance:?}: {first}"
            );
            let again = agent.call("create_invoice", args, json!({})).await;
            assert_eq!(
                execution_id(&again),
                execution_id(&first),
                "{balance:?}: {again}"
            );
            assert_eq!(execution(&again)["attempt"], "recovered", "{balance:?}");
            ids.push(execution_id(&first));
        }
        let status = agent
            .call(
                "execution_status",
                json!({"execution_id": ids[0]}),
                json!({}),
            )
            .await;
        assert_eq!(execution_id(&status), ids[0], "{balance:?}: {status}");
        assert_eq!(
            posts(&target.state),
            4,
            "{balance:?}: one invoice per intent"
        );

        // An approval given on one replica while the call's arguments may be held by the
        // other: the second replica sees it decided, and the agent's identical retry, wherever
        // it lands, sends it once.
        let pay = json!({"customer": format!("lb-{tag}-pay"), "amount": 99});
        let waiting = agent.call("pay_invoice", pay.clone(), json!({})).await;
        assert_eq!(
            execution(&waiting)["state"],
            "awaiting_approval",
            "{balance:?}: {waiting}"
        );
        let id = execution_id(&waiting);
        let http = crate::harness::http_client();
        for (n, replica) in [&a, &b].into_iter().enumerate() {
            let base = replica.url.trim_end_matches("/mcp");
            let shown = crate::harness::ops_get(&http, &format!("{base}/ops/approvals/{id}")).await;
            let fingerprint = shown["fingerprint"].as_str().unwrap().to_string();
            let status = http
                .post(format!("{base}/ops/approvals/{id}/approve"))
                .bearer_auth(crate::harness::ALICE_TOKEN)
                .json(&json!({"fingerprint": fingerprint}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            assert_eq!(
                status,
                if n == 0 { 200 } else { 409 },
                "{balance:?}: approval on replica {n}"
            );
        }
        let mut done = Value::Null;
        for _ in 0..50 {
            done = agent.call("pay_invoice", pay.clone(), json!({})).await;
            if execution(&done)["state"] == "completed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(execution_id(&done), id, "{balance:?}: {done}");
        assert_eq!(
            execution(&done)["state"],
            "completed",
            "{balance:?}: {done}"
        );
        assert_eq!(
            posts(&target.state),
            5,
            "{balance:?}: the approved call sent once"
        );
        // Where the calls were served: both replicas round-robin, one when sticky.
        // (The calls log rides each replica's next commit: read it once all the calls are there.)
        let mut instances = Vec::new();
        for _ in 0..100 {
            instances = query(&store, "SELECT instance FROM calls").await;
            if instances.len() >= 11 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let served_by: std::collections::BTreeSet<String> = instances
            .iter()
            .map(|r| r.get::<String, _>("instance"))
            .collect();
        let served_by = served_by.len();
        match balance {
            Balance::RoundRobin => assert_eq!(served_by, 2, "round-robin spreads one session"),
            Balance::StickyBySession => assert_eq!(served_by, 1, "a session sticks to a replica"),
        }
        // The Sessions log names the agent's address, not the balancer's.
        let runs = query(&store, "SELECT DISTINCT client_address FROM runs").await;
        let addresses: Vec<Option<String>> = runs.iter().map(|r| r.get("client_address")).collect();
        assert_eq!(addresses, [Some("127.0.0.2".to_string())], "{balance:?}");
        drop(lb);
    }
}

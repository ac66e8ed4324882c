//! Issue 21 end to end: an execution whose answer was lost, then retried while the target
//! refuses connections (a restart or deploy), must stay `outcome_unknown` — never `failed`,
//! never "safe to call again" — so that the retry after the outage settles the SAME execution
//! and the target holds ONE invoice, not two.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postern_demo::target::{InvoiceApi, InvoiceApiHandle, Mode};
use serde_json::{json, Value};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

use crate::harness::{
    activity, config, eventually, execution, execution_id, posts, Dir, Mcp, Served, BILLING_TOKEN,
};

/// A TCP relay in front of the target. Stopping it drops its listener and cuts the connections
/// it relays, as a target going down would, so new connections are refused (the HTTP channel's
/// `NotSent`: provably nothing left) while the target itself keeps its state; listening again
/// rebinds the same port, as a redeployed target would.
struct Relay {
    addr: SocketAddr,
    upstream: SocketAddr,
    accepting: Option<JoinHandle<()>>,
    /// The relayed connections, cut on `stop` (the gateway keeps connections for reuse).
    relayed: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let mut relay = Relay {
            addr: "127.0.0.1:0".parse().unwrap(),
            upstream,
            accepting: None,
            relayed: Arc::default(),
        };
        relay.listen();
        relay
    }

    fn listen(&mut self) {
        assert!(self.accepting.is_none(), "already listening");
        let socket = TcpSocket::new_v4().unwrap();
        // Connections relayed before the outage still hold the port (open or TIME_WAIT).
        socket.set_reuseaddr(true).unwrap();
        socket.bind(self.addr).unwrap();
        let listener = socket.listen(64).unwrap();
        self.addr = listener.local_addr().unwrap();
        let upstream = self.upstream;
        let relayed = self.relayed.clone();
        self.accepting = Some(tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let relay = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                relayed.lock().unwrap().push(relay.abort_handle());
            }
        }));
    }

    /// Stops listening and cuts the connections it relays.
    async fn stop(&mut self) {
        let task = self.accepting.take().expect("listening");
        task.abort();
        // The listener is closed once the aborted task has been dropped, which awaiting shows.
        let _ = task.await;
        for relay in self.relayed.lock().unwrap().drain(..) {
            relay.abort();
        }
        // The gateway's connection tasks see the close at once; this leaves them the time to
        // drop those connections from its pool before the test's next call.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            TcpStream::connect(self.addr).await.is_err(),
            "the relay still accepts connections"
        );
    }
}

/// The invoice API behind a relay, and a gateway whose tools point at the relay.
async fn setup(tag: &str, response_timeout: &str) -> (InvoiceApiHandle, Relay, Dir, Served) {
    let target = InvoiceApi::start().await.unwrap();
    let relay = Relay::start(target.addr).await;
    let dir = Dir::new(tag);
    let text = config(&format!("http://{}", relay.addr)).replace(
        "response_timeout = \"1s\"",
        &format!("response_timeout = \"{response_timeout}\""),
    );
    let served = Served::start(&dir.0, &text);
    (target, relay, dir, served)
}

async fn invoice(mcp: &Mcp, tool: &str, customer: &str) -> Value {
    mcp.call(
        tool,
        json!({"customer": customer, "amount": 250}),
        json!({}),
    )
    .await
}

/// The answer the agent must get while the target cannot be reached: not an error, the same
/// execution, still unknown, and told to repeat the identical call rather than start anew.
fn assert_still_unknown(resp: &Value, id: &str) {
    assert!(resp["error"].is_null(), "{resp}");
    assert!(
        matches!(resp["result"]["isError"], Value::Null | Value::Bool(false)),
        "{resp}"
    );
    let ex = execution(resp);
    assert_eq!(ex["execution_id"], id, "{resp}");
    assert_eq!(ex["state"], "outcome_unknown", "{resp}");
    let next = ex["next_step"].as_str().unwrap_or_default();
    assert!(
        next.starts_with("outcome still unknown: the target could not be reached to settle this"),
        "{resp}"
    );
    assert!(next.contains("do not start a new action"), "{resp}");
    assert!(next.contains(&format!("execution_status({id})")), "{resp}");
    assert!(!resp.to_string().contains("safe to call again"), "{resp}");
}

/// The execution's recorded event names; asserts there is exactly one execution and no
/// `failed` among its events (after a dispatch, nothing may claim that nothing was sent).
fn events_of_only_execution(dir: &Path, id: &str) -> Vec<String> {
    let list = activity(dir, &["list"]);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id], "one execution, the original: {list}");
    let shown = activity(dir, &["show", id]);
    let names: Vec<String> = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert!(!names.iter().any(|n| n == "failed"), "{names:?}");
    names
}

fn count(names: &[String], name: &str) -> usize {
    names.iter().filter(|n| *n == name).count()
}

/// The Idempotency-Keys of the POSTs that reached the target for `customer`.
fn post_keys(target: &InvoiceApi, customer: &str) -> Vec<Option<String>> {
    target
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.body.contains(customer))
        .map(|r| r.idempotency_key.clone())
        .collect()
}

/// The reproduction: lost answer, then an outage (status query and re-send both
/// refused), then the target is back: the status query settles the same execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_then_an_outage_never_becomes_a_second_invoice() {
    let customer = "lost-then-outage-co";
    let (target, mut relay, dir, served) = setup("lost-outage", "1s").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    target.state.set_mode(Mode::HangOnce);
    let first = invoice(&mcp, "create_invoice", customer).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let id = execution_id(&first);
    assert_eq!(target.state.count_for(customer), 1, "the target applied it");

    relay.stop().await;
    let seen = target.state.requests().len();
    let during = invoice(&mcp, "create_invoice", customer).await;
    assert_still_unknown(&during, &id);
    assert_eq!(target.state.requests().len(), seen, "nothing got through");

    relay.listen();
    let after = invoice(&mcp, "create_invoice", customer).await;
    let ex = execution(&after);
    assert_eq!(ex["execution_id"], id.as_str(), "{after}");
    assert_eq!(ex["state"], "completed", "{after}");
    assert_eq!(ex["attempt"], "recovered", "{after}");
    assert_eq!(
        after["result"]["structuredContent"]["response"]["customer"],
        customer
    );
    assert_eq!(target.state.count_for(customer), 1, "ONE invoice");
    assert_eq!(posts(&target.state), 1, "settled by the status query");

    let names = events_of_only_execution(&dir.0, &id);
    // The first lost answer and the refused re-send: each recorded as unknown.
    assert_eq!(count(&names, "outcome_unknown"), 2, "{names:?}");
    assert!(
        names.contains(&"completed(applied)".to_string()),
        "{names:?}"
    );
}

/// No status query: a 500 (which may have half happened), then an outage that refuses the
/// re-send, then the target is back: the re-send with the same key settles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_then_an_outage_stays_unknown() {
    let customer = "fail500-then-outage-co";
    let (target, mut relay, dir, served) = setup("500-outage", "1s").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    target.state.set_mode(Mode::Fail500);
    let first = invoice(&mcp, "create_invoice_resend", customer).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let id = execution_id(&first);

    relay.stop().await;
    let during = invoice(&mcp, "create_invoice_resend", customer).await;
    assert_still_unknown(&during, &id);
    assert_eq!(post_keys(&target.state, customer).len(), 1);

    relay.listen();
    target.state.set_mode(Mode::Normal);
    let after = invoice(&mcp, "create_invoice_resend", customer).await;
    assert_eq!(execution(&after)["execution_id"], id.as_str(), "{after}");
    assert_eq!(execution(&after)["state"], "completed", "{after}");
    assert_eq!(target.state.count_for(customer), 1, "ONE invoice");
    assert_eq!(
        post_keys(&target.state, customer),
        [Some(id.clone()), Some(id.clone())],
        "re-sent once, with the same Idempotency-Key"
    );

    let names = events_of_only_execution(&dir.0, &id);
    assert_eq!(count(&names, "outcome_unknown"), 2, "{names:?}");
}

/// `kill -9` of the gateway while the target holds the answer; the restart's recovery scan
/// marks the execution unknown; the retry during an outage must keep it so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill9_then_an_outage_stays_unknown() {
    let customer = "kill9-then-outage-co";
    // Long enough that the gateway is killed while still waiting for the answer.
    let (target, mut relay, dir, served) = setup("kill9-outage", "30s").await;
    target.state.set_mode(Mode::HangAfterCreate);
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let req = mcp.request(
        "create_invoice_resend",
        json!({"customer": customer, "amount": 250}),
        json!({}),
    );
    let pending = tokio::spawn(async move { mcp.raw(&req, Some(Duration::from_secs(20))).await });
    eventually("the target to apply the request", || {
        target.state.count_for(customer) == 1
    })
    .await;
    served.kill9();
    let _ = pending.await;
    target.state.set_mode(Mode::Normal);

    let restarted = Served::spawn(&dir.0, "127.0.0.1:0");
    let list = activity(&dir.0, &["list"]);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(
        list[0]["state"], "outcome_unknown",
        "the recovery scan: {list}"
    );
    let id = list[0]["execution_id"].as_str().unwrap().to_string();

    relay.stop().await;
    let mcp = Mcp::connect(&restarted.url, BILLING_TOKEN).await;
    let during = invoice(&mcp, "create_invoice_resend", customer).await;
    assert_still_unknown(&during, &id);

    relay.listen();
    let after = invoice(&mcp, "create_invoice_resend", customer).await;
    assert_eq!(execution(&after)["execution_id"], id.as_str(), "{after}");
    assert_eq!(execution(&after)["state"], "completed", "{after}");
    assert_eq!(execution(&after)["attempt"], "recovered", "{after}");
    assert_eq!(target.state.count_for(customer), 1, "ONE invoice");
    assert_eq!(
        post_keys(&target.state, customer),
        [Some(id.clone()), Some(id.clone())],
        "re-sent once, with the same Idempotency-Key"
    );

    let names = events_of_only_execution(&dir.0, &id);
    assert_eq!(count(&names, "outcome_unknown"), 2, "{names:?}");
}

//! Resumable streams and disconnects (issue #5), end to end: a real `postern serve` process, a
//! real SQLite ledger file and the invoice API on loopback, spoken to in raw HTTP.
//!
//! - A legacy (session) client that loses a `tools/call` stream after its priming event gets the
//!   result by `GET` with `Last-Event-ID`, also after the gateway restarted (gracefully or by
//!   `kill -9`); the target acts once and the ledger records the replay as the delivery.
//! - A stream is resumed only by the session and actor that opened it, and only that stream.
//! - A sessionless (2026-07-28) call whose client goes away runs on once dispatched, and is
//!   recorded `cancelled` (nothing sent) when the client left before the accept was written.

use std::time::Duration;

use postern_core::ExecutionId;
use postern_demo::target::{InvoiceApi, InvoiceApiHandle, Mode};
use postern_ledger::{ExecutionSummary, Ledger, LedgerOptions, ListFilter};
use serde_json::json;

use crate::harness::{config, execution, posts, Dir, Served, BILLING_TOKEN, OPS_TOKEN};

mod sessionless;
pub(crate) mod sse;

use sse::{
    assert_continues, http, priming, response_in, resume, stream_of, Event, Session, SseReader,
};

/// The target sleeps this long after creating the invoice, before it answers.
const SLOW: Duration = Duration::from_millis(1500);
/// Bound on every wait for the gateway or its ledger.
const PATIENCE: Duration = Duration::from_secs(20);

/// The test config with a response timeout the slow target stays within.
fn slow_config(target: &InvoiceApiHandle) -> String {
    config(&format!("http://{}", target.addr))
        .replace("response_timeout = \"1s\"", "response_timeout = \"30s\"")
}

async fn setup(tag: &str) -> (InvoiceApiHandle, Dir, Served, String) {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new(tag);
    let text = slow_config(&target);
    let served = Served::start(&dir.0, &text);
    (target, dir, served, text)
}

async fn open_ledger(served: &Served) -> Ledger {
    Ledger::open(&served.store(), LedgerOptions::default())
        .await
        .unwrap()
        .0
}

async fn all_executions(ledger: &Ledger) -> Vec<ExecutionSummary> {
    ledger
        .read()
        .list(&ListFilter {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
}

/// The names of an execution's lifecycle events, in order.
async fn event_names(ledger: &Ledger, id: ExecutionId) -> Vec<String> {
    ledger
        .read()
        .execution(id)
        .await
        .unwrap()
        .expect("the execution exists")
        .events
        .iter()
        .map(|e| e.body.event.name().to_string())
        .collect()
}

/// Polls until the ledger holds exactly one execution whose event names satisfy `done`.
async fn wait_for_the_execution(
    ledger: &Ledger,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> (ExecutionId, Vec<String>) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        let all = all_executions(ledger).await;
        assert!(all.len() <= 1, "more than one execution: {all:?}");
        if let Some(s) = all.first() {
            let names = event_names(ledger, s.id).await;
            if done(&names) {
                return (s.id, names);
            }
            last = Some(names);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}; the execution's events: {last:?}");
}

fn has(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n == name)
}

fn completed(names: &[String]) -> bool {
    names.iter().any(|n| n.starts_with("completed"))
}

/// The last delivery event is `delivered`, after the lost delivery (`delivery_failed`).
fn delivered_after_loss(names: &[String]) -> bool {
    let failed = names.iter().position(|n| n == "delivery_failed");
    let delivered = names.iter().rposition(|n| n == "delivered");
    matches!((failed, delivered), (Some(f), Some(d)) if d > f)
        && names
            .iter()
            .rev()
            .find(|n| n.starts_with("deliver"))
            .is_some_and(|n| n == "delivered")
}

/// Opens a session, calls the slow tool and cuts the connection right after the priming
/// event. Returns the session and the priming event id.
async fn call_and_cut(served: &Served, version: &str, rpc_id: i64) -> (Session, String) {
    let session = Session::open(&served.url, BILLING_TOKEN, version).await;
    let mut stream = session
        .call(
            rpc_id,
            "create_invoice",
            json!({"customer": "resume-co", "amount": 1500}),
        )
        .await;
    let primed = priming(&mut stream).await;
    // The cut: the connection goes away before the result exists.
    drop(stream);
    (session, primed)
}

/// Resumes `primed` and checks the replay: the stream continues, its response carries the
/// one execution's completed result. Returns that execution id.
async fn resume_and_check(session: &Session, primed: &str, rpc_id: i64) -> String {
    let resp = session.resume(primed).await;
    assert_eq!(resp.status().as_u16(), 200, "resume of {primed}");
    let events = SseReader::new(resp).rest().await;
    assert_continues(&events, stream_of(primed));
    let answer = response_in(&events, rpc_id);
    let ex = execution(&answer);
    assert_eq!(ex["state"], "completed", "{answer}");
    assert_eq!(ex["attempt"], "new", "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["response"]["customer"], "resume-co",
        "{answer}"
    );
    ex["execution_id"]
        .as_str()
        .expect("an execution id")
        .to_string()
}

/// Case 1: the stream of a `tools/call` is cut after its priming event; the target finishes;
/// the client resumes with `Last-Event-ID` and gets the result. One invoice; the ledger records
/// the lost delivery and then the replay's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_resumed_with_its_result() {
    let (target, _dir, served, _) = setup("resume-cut").await;
    target.state.set_mode(Mode::SlowOnce(SLOW));
    let (session, primed) = call_and_cut(&served, "2025-11-25", 7).await;

    let ledger = open_ledger(&served).await;
    let (id, _) = wait_for_the_execution(&ledger, "the result and its lost delivery", |n| {
        completed(n) && has(n, "delivery_failed")
    })
    .await;
    assert_eq!(target.state.count_for("resume-co"), 1);

    let replayed = resume_and_check(&session, &primed, 7).await;
    assert_eq!(replayed, id.to_string());
    assert_eq!(target.state.count_for("resume-co"), 1);
    assert_eq!(posts(&target.state), 1);
    let (_, names) = wait_for_the_execution(&ledger, "the replay's delivery", |n| {
        delivered_after_loss(n)
    })
    .await;
    assert!(completed(&names), "{names:?}");
}

/// Case 2: the cut of case 1, then a gateway restart on the same ledger file and port before
/// the resume: the session is restored from the ledger and the resume delivers the result.
async fn resumed_across_a_restart(tag: &str, kill9: bool) {
    let (target, dir, served, text) = setup(tag).await;
    target.state.set_mode(Mode::SlowOnce(SLOW));
    let (session, primed) = call_and_cut(&served, "2025-06-18", 3).await;
    {
        let ledger = open_ledger(&served).await;
        wait_for_the_execution(&ledger, "the result and its lost delivery", |n| {
            completed(n) && has(n, "delivery_failed")
        })
        .await;
    }
    let addr = served.addr().to_string();
    if kill9 {
        // Past the result by more than the lazy commit of the stream's events.
        tokio::time::sleep(Duration::from_millis(300)).await;
        served.kill9();
    } else {
        served.stop();
    }

    let restarted = Served::start_on(&dir.0, &text, &addr);
    assert_eq!(restarted.url, session.url, "the same address");
    let replayed = resume_and_check(&session, &primed, 3).await;
    assert_eq!(target.state.count_for("resume-co"), 1);
    assert_eq!(posts(&target.state), 1, "the target saw one request");

    let ledger = open_ledger(&restarted).await;
    let (id, _) = wait_for_the_execution(&ledger, "the replay's delivery", |n| {
        delivered_after_loss(n)
    })
    .await;
    assert_eq!(replayed, id.to_string());

    // The restored session goes on working.
    let resp = session
        .post(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let events = SseReader::new(resp).rest().await;
    let list = response_in(&events, 4);
    assert!(list["result"]["tools"].as_array().is_some(), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_resumed_after_a_graceful_restart() {
    resumed_across_a_restart("resume-stop", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_resumed_after_kill_9() {
    resumed_across_a_restart("resume-kill9", true).await;
}

/// A random UUID (v4 layout).
fn random_uuid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).unwrap();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Case 3: a stream is resumed only by its own session and actor, and an id names one stream
/// only: another session, another actor, no session or a made-up id get 404 and nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_resumes_and_only_that_stream() {
    let (target, _dir, served, _) = setup("resume-forged").await;
    let owner = Session::open(&served.url, BILLING_TOKEN, "2025-06-18").await;
    // Two complete streams in one session.
    let mut a = owner
        .call(
            11,
            "create_invoice",
            json!({"customer": "a-co", "amount": 1}),
        )
        .await;
    let a0 = priming(&mut a).await;
    let a_answer = response_in(&a.rest().await, 11);
    let a_exe = execution(&a_answer)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut b = owner
        .call(
            12,
            "create_invoice",
            json!({"customer": "b-co", "amount": 2}),
        )
        .await;
    let b0 = priming(&mut b).await;
    let b_answer = response_in(&b.rest().await, 12);
    let b_exe = execution(&b_answer)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(stream_of(&a0), stream_of(&b0));
    assert_ne!(a_exe, b_exe);

    // Each id replays its own stream, and nothing of the other.
    for (id, rpc, exe, other_exe) in [(&a0, 11, &a_exe, &b_exe), (&b0, 12, &b_exe, &a_exe)] {
        let resp = owner.resume(id).await;
        assert_eq!(resp.status().as_u16(), 200, "the owner resumes {id}");
        let events = SseReader::new(resp).rest().await;
        assert_continues(&events, stream_of(id));
        let answer = response_in(&events, rpc);
        assert_eq!(&execution(&answer)["execution_id"], exe.as_str());
        let all: String = events.iter().map(|e| e.data.as_str()).collect();
        assert!(
            !all.contains(other_exe.as_str()),
            "resuming {id} replayed another stream's answer: {events:?}"
        );
        assert_eq!(
            events.iter().filter_map(Event::message).count(),
            1,
            "{events:?}"
        );
    }

    // Forged: everything but the owning session and actor is refused, with nothing of it.
    let other_session = Session::open(&served.url, BILLING_TOKEN, "2025-06-18").await;
    let other_actor = Session::open(&served.url, OPS_TOKEN, "2025-06-18").await;
    let client = http();
    let forged: Vec<(&str, reqwest::Response)> = vec![
        (
            "another session of the same actor",
            other_session.resume(&a0).await,
        ),
        (
            "another actor in its own session",
            other_actor.resume(&a0).await,
        ),
        (
            "another actor presenting the owner's session id",
            resume(&client, &served.url, OPS_TOKEN, Some(&owner.id), &a0).await,
        ),
        (
            "no session at all",
            resume(&client, &served.url, BILLING_TOKEN, None, &a0).await,
        ),
        (
            "a made-up id of the right shape",
            owner.resume(&format!("{}/0", random_uuid())).await,
        ),
        (
            "another session's standalone stream",
            other_session
                .resume(&format!("{}:common/0", owner.id))
                .await,
        ),
    ];
    for (what, resp) in forged {
        let status = resp.status().as_u16();
        let body = tokio::time::timeout(PATIENCE, resp.text())
            .await
            .unwrap()
            .unwrap_or_default();
        assert_eq!(status, 404, "{what}: {body}");
        assert!(
            !body.contains(&a_exe) && !body.contains("structuredContent"),
            "{what} got some of the stream: {body}"
        );
    }
    assert_eq!(posts(&target.state), 2);
}

/// The chain (the writing instance) of an execution's last event named `name`.
async fn chain_of(ledger: &Ledger, id: ExecutionId, name: &str) -> String {
    ledger
        .read()
        .execution(id)
        .await
        .unwrap()
        .unwrap()
        .events
        .iter()
        .rev()
        .find(|e| e.body.event.name() == name)
        .unwrap_or_else(|| panic!("no {name} event"))
        .body
        .chain
        .clone()
}

/// Case 5: two replicas on one PostgreSQL. A legacy session opened on replica A loses a
/// `tools/call` stream after its priming event; once the execution completed, the client resumes
/// on replica B with the same session id and `Last-Event-ID`: B restores the session from the
/// ledger and replays the result A recorded. The target acted once; B records the delivery.
/// Another session presenting that event id on B gets 404 and nothing of the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_resumed_on_another_replica_on_postgres() {
    let target = InvoiceApi::start().await.unwrap();
    let store = crate::harness::fresh_postgres().await;
    let sqlite_store = "store = \"sqlite://ledger.db\"";
    let text = slow_config(&target);
    assert!(text.contains(sqlite_store));
    let text = text.replace(sqlite_store, &format!("store = \"{store}\""));
    let (dir_a, dir_b) = (Dir::new("resume-pg-a"), Dir::new("resume-pg-b"));
    let replica_a = Served::start(&dir_a.0, &text);
    let replica_b = Served::start(&dir_b.0, &text);
    assert_ne!(replica_a.url, replica_b.url, "two replicas, two ports");

    target.state.set_mode(Mode::SlowOnce(SLOW));
    let (on_a, primed) = call_and_cut(&replica_a, "2025-06-18", 9).await;
    let stream = stream_of(&primed).to_string();

    let ledger = Ledger::open(&store, LedgerOptions::default())
        .await
        .unwrap()
        .0;
    let (id, _) = wait_for_the_execution(&ledger, "the result and its lost delivery", |n| {
        completed(n) && has(n, "delivery_failed")
    })
    .await;
    assert_eq!(target.state.count_for("resume-co"), 1);
    // Replica A wrote the cut stream to the shared ledger, its owner and final answer included
    // (the events share A's next commit, so they may land a moment after the result).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let stored = loop {
        let events = ledger
            .read()
            .stream_events_after(&stream, None)
            .await
            .unwrap();
        if events.iter().any(|e| e.last) {
            break events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replica A never wrote the cut stream's end to the ledger: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(stored[0].n, 0, "{stored:?}");
    let last = stored.last().unwrap();
    assert_eq!(last.execution_id, Some(id), "{stored:?}");
    let owner = ledger.read().stream_owner(&stream).await.unwrap();
    let owner = owner.expect("the cut stream's owner is in the ledger");
    assert_eq!(owner.session_id.as_deref(), Some(on_a.id.as_str()));
    assert_eq!(owner.actor, "billing");

    // The same client, now talking to replica B: same session id, same token.
    let on_b = Session {
        http: http(),
        url: replica_b.url.clone(),
        token: on_a.token.clone(),
        version: on_a.version.clone(),
        id: on_a.id.clone(),
    };

    // Another session (of the same actor, opened on B) presenting the event id: 404, nothing.
    let other = Session::open(&replica_b.url, BILLING_TOKEN, "2025-06-18").await;
    let exe = id.to_string();
    let refused = |what: &'static str, resp: reqwest::Response| {
        let exe = exe.clone();
        async move {
            let status = resp.status().as_u16();
            let body = tokio::time::timeout(PATIENCE, resp.text())
                .await
                .unwrap()
                .unwrap_or_default();
            assert_eq!(status, 404, "{what}: {body}");
            assert!(
                !body.contains(&exe) && !body.contains("structuredContent"),
                "{what} got some of the stream: {body}"
            );
        }
    };
    refused(
        "another session on replica B, before the owner resumed",
        other.resume(&primed).await,
    )
    .await;
    refused(
        "another actor presenting the owner's session id on replica B",
        resume(&http(), &replica_b.url, OPS_TOKEN, Some(&on_b.id), &primed).await,
    )
    .await;

    // The owner resumes on B and gets the result A's execution recorded.
    let replayed = resume_and_check(&on_b, &primed, 9).await;
    assert_eq!(replayed, exe);
    assert_eq!(target.state.count_for("resume-co"), 1);
    assert_eq!(posts(&target.state), 1, "the target saw one request");
    assert_eq!(all_executions(&ledger).await.len(), 1);
    let (_, names) = wait_for_the_execution(&ledger, "the replay's delivery", |n| {
        delivered_after_loss(n)
    })
    .await;
    assert!(completed(&names), "{names:?}");
    assert_ne!(
        chain_of(&ledger, id, "delivered").await,
        chain_of(&ledger, id, "dispatched").await,
        "replica B recorded the delivery of replica A's execution"
    );

    refused(
        "another session on replica B, after the owner resumed",
        other.resume(&primed).await,
    )
    .await;

    // The session restored on B goes on working there.
    let resp = on_b
        .post(&json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let list = response_in(&SseReader::new(resp).rest().await, 10);
    assert!(list["result"]["tools"].as_array().is_some(), "{list}");
    ledger.close().await;
}

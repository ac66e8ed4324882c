//! Issue 35: the per-actor caps on MCP sessions and SSE streams never lock out the actor they
//! protect — at the cap the idlest session or stream gives way, one with an answer in flight
//! never does — each against the real `postern serve`.

use std::time::Duration;

use postern_demo::target::InvoiceApi;
use serde_json::json;

use crate::harness::{config, Dir, Served, BILLING_TOKEN, OPS_TOKEN};
use crate::limits::with_alice;

/// Issues 12 and 35: at `max_sessions_per_actor`, a new `initialize` takes the place of the
/// actor's least recently used idle session, whose next request gets 404 (unknown session) and
/// whose run ends `evicted`; a session with a call in flight is never the one, an idle `GET`
/// stream does not pin one. Other actors are untouched, and a `DELETE` frees a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_session_cap_the_idlest_session_gives_way() {
    use postern_demo::client::McpClient;
    use postern_demo::target::Mode;
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("session-cap");
    let text = with_alice(&config(&format!("http://{}", target.addr)), &dir)
        .replace("[gateway]\n", "[gateway]\nmax_sessions_per_actor = 2\n");
    let served = Served::start(&dir.0, &text);
    let connect = |token: &'static str| McpClient::connect(&served.url, token, "postern-tests");
    let one = connect(BILLING_TOKEN).await.unwrap();
    let two = connect(BILLING_TOKEN).await.unwrap();
    one.call("list_invoices", json!({}), json!({}))
        .await
        .unwrap();
    two.call("list_invoices", json!({}), json!({}))
        .await
        .unwrap();
    // `one` was used before `two`: it gives way.
    let three = connect(BILLING_TOKEN)
        .await
        .expect("the cap evicts, never locks out");
    let (_, list) = one.request("list_invoices", json!({}), json!({}));
    let (status, body) = one.raw(&list, None).await.unwrap();
    assert_eq!(status, 404, "an evicted session is unknown: {body}");
    crate::harness::eventually("the run's end recorded", || {
        crate::harness::operator_json(
            &served,
            &[
                "sessions",
                "show",
                &format!("mcp-session:{}", one.session()),
            ],
        )
        .to_string()
        .contains("\"evicted\"")
    })
    .await;

    // Both held sessions busy: `two` waits on a slow target, `three` on a second slow call.
    target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_secs(3)));
    let slow = {
        let (_, create) = two.request(
            "create_invoice",
            json!({"customer": "slow-co", "amount": 1}),
            json!({}),
        );
        let two = &two;
        async move { two.raw(&create, None).await }
    };
    let probe = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let (_, listed) = three.request("list_invoices", json!({}), json!({}));
        let held_open = three.raw(&listed, None);
        let refused = async {
            // `three` is idle again once its quick call is answered, so it gives way; but while
            // `two` is busy it never does.
            held_open.await.unwrap();
            let four = connect(BILLING_TOKEN).await.expect("three was idle");
            let (_, again) = three.request("list_invoices", json!({}), json!({}));
            assert_eq!(three.raw(&again, None).await.unwrap().0, 404);
            four
        };
        refused.await
    };
    let (slow, four) = tokio::join!(slow, probe);
    assert_eq!(slow.unwrap().0, 200, "the busy session was not evicted");
    // Idle GET streams do not pin their sessions: the least recently used (`four`, unused since
    // it opened; `two` answered its slow call later) gives way, and its stream ends with it.
    let stream_two = get_stream(&served.url, two.session()).await;
    let stream_four = get_stream(&served.url, four.session()).await;
    assert_eq!(
        (stream_two.status().as_u16(), stream_four.status().as_u16()),
        (200, 200)
    );
    let _five = connect(BILLING_TOKEN)
        .await
        .expect("an idle stream does not pin its session");
    let ended = tokio::time::timeout(Duration::from_secs(5), stream_four.text()).await;
    assert!(ended.is_ok(), "the evicted session's stream ended");
    connect(OPS_TOKEN)
        .await
        .expect("another actor is not held up");
    assert_eq!(two.close().await.unwrap(), 204);
    connect(BILLING_TOKEN)
        .await
        .expect("a closed session frees its slot");
}

/// Issue 35: a session with a call in flight is never evicted; when every session of the actor
/// is busy, a new one is refused (429 naming the limit, `Retry-After`, nothing opened) until one
/// is idle again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_session_is_busy_a_new_one_is_refused_until_one_is_idle() {
    use postern_demo::client::McpClient;
    use postern_demo::target::Mode;
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("session-busy");
    let text = config(&format!("http://{}", target.addr))
        .replace("[gateway]\n", "[gateway]\nmax_sessions_per_actor = 1\n");
    let served = Served::start(&dir.0, &text);
    let busy = McpClient::connect(&served.url, BILLING_TOKEN, "postern-tests")
        .await
        .unwrap();
    target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_secs(2)));
    let (_, slow) = busy.request(
        "create_invoice",
        json!({"customer": "busy-co", "amount": 1}),
        json!({}),
    );
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "postern-tests", "version": "0"}}});
    let refused = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let refused = crate::harness::http_client()
            .post(&served.url)
            .header("authorization", format!("Bearer {BILLING_TOKEN}"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 429);
        assert_eq!(refused.headers()["retry-after"], "1");
        let body = refused.text().await.unwrap();
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            error["error"]["data"]["limit"], "max_sessions_per_actor",
            "{body}"
        );
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("no session was opened"), "{message}");
    };
    let (answered, ()) = tokio::join!(busy.raw(&slow, None), refused);
    assert_eq!(answered.unwrap().0, 200, "the busy session was not evicted");
    McpClient::connect(&served.url, BILLING_TOKEN, "postern-tests")
        .await
        .expect("idle again, it gives way");
}

/// Issue 35, acceptance 1: a session with a call in flight (a slow target) is never evicted
/// while 200 more sessions of its actor are opened at a cap of 2: every one of them is opened
/// (each evicting the one before it), and the slow call's answer and a next call on its
/// session arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_a_call_in_flight_outlives_200_newer_ones() {
    use postern_demo::client::McpClient;
    use postern_demo::target::Mode;
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("session-in-flight");
    let text = config(&format!("http://{}", target.addr))
        .replace("response_timeout = \"1s\"", "response_timeout = \"30s\"")
        .replace("[gateway]\n", "[gateway]\nmax_sessions_per_actor = 2\n");
    let served = Served::start(&dir.0, &text);
    let http = crate::harness::http_client();
    let busy = McpClient::connect_with(http.clone(), &served.url, BILLING_TOKEN, "busy")
        .await
        .unwrap();
    target
        .state
        // Longer than 200 sessions take on a loaded machine: the call must still be in flight
        // when the last of them opens (once it is answered its session is idle, and may go).
        .set_mode(Mode::SlowOnce(Duration::from_secs(12)));
    let (_, slow) = busy.request(
        "create_invoice",
        json!({"customer": "in-flight-co", "amount": 1}),
        json!({}),
    );
    let started = std::time::Instant::now();
    let newer = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for i in 0..200 {
            McpClient::connect_with(http.clone(), &served.url, BILLING_TOKEN, "careless")
                .await
                .unwrap_or_else(|e| panic!("session {i} was refused: {e:?}"));
        }
        assert!(
            started.elapsed() < Duration::from_secs(11),
            "the 200 sessions took {:?}: the call was no longer in flight, so this proves nothing",
            started.elapsed()
        );
    };
    let (answered, ()) = tokio::join!(busy.raw(&slow, None), newer);
    let (status, body) = answered.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        crate::harness::sse_message(&body)["result"].is_object(),
        "{body}"
    );
    let next = busy
        .call("list_invoices", json!({}), json!({}))
        .await
        .unwrap();
    assert!(
        next["result"].is_object(),
        "the busy session was kept: {next}"
    );
    assert_eq!(target.state.count_for("in-flight-co"), 1);
}

/// Issue 35, acceptance 1: 1,001 `initialize` of one actor without a `DELETE` (the default cap,
/// 64) are all answered 200, a call on the newest session completes, the first session is
/// unknown (404) and every eviction is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_abandoned_sessions_never_lock_the_actor_out() {
    use postern_demo::client::McpClient;
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("session-churn");
    let text = with_alice(&config(&format!("http://{}", target.addr)), &dir);
    let served = Served::start(&dir.0, &text);
    let http = crate::harness::http_client();
    let first = McpClient::connect_with(http.clone(), &served.url, BILLING_TOKEN, "careless")
        .await
        .unwrap();
    first
        .call("list_invoices", json!({}), json!({}))
        .await
        .unwrap();
    // Eight careless agents at once (an initialize waits for its session's owner to be stored).
    let mut agents = tokio::task::JoinSet::new();
    for agent in 0..8 {
        let (http, url) = (http.clone(), served.url.clone());
        agents.spawn(async move {
            let mut last = None;
            for i in (1 + agent..1000).step_by(8) {
                let session =
                    McpClient::connect_with(http.clone(), &url, BILLING_TOKEN, "careless")
                        .await
                        .unwrap_or_else(|e| panic!("initialize {i} was refused: {e:?}"));
                last = Some(session);
            }
            last
        });
    }
    let mut lasts = Vec::new();
    while let Some(last) = agents.join_next().await {
        lasts.push(last.unwrap().unwrap());
    }
    let newest = McpClient::connect_with(http.clone(), &served.url, BILLING_TOKEN, "careless")
        .await
        .expect("the 1,001st initialize");
    let done = newest
        .call("list_invoices", json!({}), json!({}))
        .await
        .unwrap();
    assert!(done["result"].is_object(), "{done}");
    let (_, list) = first.request("list_invoices", json!({}), json!({}));
    assert_eq!(first.raw(&list, None).await.unwrap().0, 404);
    let metrics = crate::harness::metrics(&format!("http://{}", served.addr())).await;
    let evicted: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("postern_session_evictions_total "))
        .unwrap_or_else(|| panic!("no eviction count in:\n{metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        evicted,
        1001.0 - 64.0,
        "every session past the cap evicted one"
    );
    drop(lasts);
}

/// Issues 12 and 35: an actor keeps at most `max_streams_per_actor` SSE streams open. An idle
/// standalone `GET` stream gives way to a request (the stream ends cleanly, and the client may
/// open it again); a stream that carries an answer never does: with one in flight, another
/// request is refused with 429 and `Retry-After` before anything is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_stream_cap_an_idle_stream_gives_way_and_an_answer_never_does() {
    use postern_demo::client::McpClient;
    use postern_demo::target::Mode;
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("stream-cap");
    let text = config(&format!("http://{}", target.addr))
        .replace("[gateway]\n", "[gateway]\nmax_streams_per_actor = 1\n");
    let served = Served::start(&dir.0, &text);
    let mcp = McpClient::connect(&served.url, BILLING_TOKEN, "postern-tests")
        .await
        .unwrap();
    let stream = get_stream(&served.url, mcp.session()).await;
    assert_eq!(stream.status(), 200);
    let created = mcp
        .call(
            "create_invoice",
            json!({"customer": "stream-co", "amount": 1}),
            json!({}),
        )
        .await
        .unwrap();
    assert!(
        created["result"].is_object(),
        "the idle stream made room: {created}"
    );
    let ended = tokio::time::timeout(Duration::from_secs(5), stream.text()).await;
    assert!(ended.is_ok(), "the idle stream was ended");

    target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_secs(2)));
    let (_, slow) = mcp.request(
        "create_invoice",
        json!({"customer": "slow-stream-co", "amount": 1}),
        json!({}),
    );
    let refused = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let (_, list) = mcp.request("list_invoices", json!({}), json!({}));
        let (status, body) = mcp.raw(&list, None).await.unwrap();
        assert_eq!(status, 429, "{body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            error["error"]["data"]["limit"], "max_streams_per_actor",
            "{body}"
        );
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("nothing was recorded or sent"),
            "{message}"
        );
        let idle = get_stream(&served.url, mcp.session()).await;
        assert_eq!(
            idle.status(),
            429,
            "an idle stream does not push an answer out"
        );
        assert_eq!(idle.headers()["retry-after"], "1");
        let ops = McpClient::connect(&served.url, OPS_TOKEN, "postern-tests")
            .await
            .expect("another actor is not held up");
        let listed = ops
            .call("list_invoices", json!({}), json!({}))
            .await
            .unwrap();
        assert!(listed["result"].is_object(), "{listed}");
    };
    let (answered, ()) = tokio::join!(mcp.raw(&slow, None), refused);
    let (status, body) = answered.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        crate::harness::sse_message(&body)["result"].is_object(),
        "{body}"
    );
    assert_eq!(target.state.count_for("stream-co"), 1);
    assert_eq!(target.state.count_for("slow-stream-co"), 1);
}

/// A standalone `GET` stream of `session`.
async fn get_stream(url: &str, session: &str) -> reqwest::Response {
    crate::harness::http_client()
        .get(url)
        .header("authorization", format!("Bearer {BILLING_TOKEN}"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap()
}

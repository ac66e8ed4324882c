//! Protocol hygiene at the HTTP edge (issue #5 item 5): Host and Origin validation against
//! DNS rebinding, `MCP-Protocol-Version` handling, and 404 for an unknown session — against a
//! real `postern serve`.

use postern_demo::target::InvoiceApi;
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{config, Dir, Mcp, Served, BILLING_TOKEN};

fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "hygiene-test", "version": "1"}}})
    .to_string()
}

async fn post(
    url: &str,
    body: String,
    headers: &[(&str, &str)],
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let mut req = crate::harness::http_client()
        .post(url)
        .header("authorization", format!("Bearer {BILLING_TOKEN}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request sent");
    let status = resp.status();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap_or_default())
}

#[tokio::test]
async fn host_origin_version_and_session_are_checked() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("hygiene");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let url = format!("http://{}/mcp", served.addr());

    // A rebinding page reaches the loopback port under its own host name: refused.
    let (status, _, _) = post(&url, initialize(), &[("host", "evil.example:80")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "foreign Host header");

    // A browser page from another origin: refused (no origins are configured).
    let (status, _, _) = post(&url, initialize(), &[("origin", "http://evil.example")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "foreign Origin header");

    // An agent (no Origin) on the loopback host: served, with a session.
    let (status, headers, _) = post(&url, initialize(), &[]).await;
    assert_eq!(status, StatusCode::OK, "plain initialize");
    assert!(
        headers.get("mcp-session-id").is_some(),
        "a session id is issued"
    );

    // A protocol version the gateway does not speak: 400, not a guess.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let session = headers["mcp-session-id"].to_str().unwrap().to_string();
    let (status, _, body) = post(
        &url,
        list.clone(),
        &[
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "1999-01-01"),
        ],
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "unsupported version: {body}"
    );

    // A session the gateway never issued (or forgot): 404, so the client starts a new one.
    let (status, _, _) = post(
        &url,
        list,
        &[
            ("mcp-session-id", "00000000-0000-4000-8000-000000000000"),
            ("mcp-protocol-version", "2025-06-18"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "unknown session");

    // And the well-behaved path still works end to end.
    let mcp = Mcp::connect(&url, BILLING_TOKEN).await;
    let r = mcp
        .call(
            "create_invoice",
            json!({"customer": "hygiene", "amount": 3}),
            json!({}),
        )
        .await;
    assert!(r.get("result").is_some(), "tools/call answered: {r}");
    served.stop();
}

/// A graceful stop (SIGINT) ends open streams instead of waiting for their clients: a session's
/// standalone GET stream is open while the gateway is told to stop, and it still exits at once.
#[tokio::test]
async fn a_graceful_stop_does_not_wait_for_open_streams() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("hygiene-stop");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let url = format!("http://{}/mcp", served.addr());
    let (status, headers, _) = post(&url, initialize(), &[]).await;
    assert_eq!(status, StatusCode::OK);
    let session = headers["mcp-session-id"].to_str().unwrap().to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let (status, _, _) = post(
        &url,
        initialized,
        &[
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "2025-06-18"),
        ],
    )
    .await;
    assert!(status.is_success(), "{status}");
    let stream = crate::harness::http_client()
        .get(&url)
        .header("authorization", format!("Bearer {BILLING_TOKEN}"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .expect("GET stream opened");
    assert_eq!(stream.status(), StatusCode::OK);
    // `stop` sends SIGINT and fails unless the process exits cleanly within 10 s.
    let stopping = tokio::task::spawn_blocking(move || served.stop());
    stopping
        .await
        .expect("postern serve stopped while a stream was open");
    drop(stream);
}

/// Issue 12: with several `Authorization` headers the first used to count; a proxy in front
/// may pick another. Refused instead, whichever comes first.
#[tokio::test]
async fn several_authorization_headers_are_refused() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("hygiene-auth");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let url = format!("http://{}/mcp", served.addr());
    let (status, _, body) = post(
        &url,
        initialize(),
        &[("authorization", "Bearer someone-else-0123456789")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("several Authorization headers"), "{body}");
    // One header with the right token still works; a wrong one is 401.
    let (status, _, _) = post(&url, initialize(), &[]).await;
    assert_eq!(status, StatusCode::OK);
    let bad = crate::harness::http_client()
        .post(&url)
        .header("authorization", "Bearer not-a-token-0123456789")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
}

/// Issue 12: an MCP session (and its `:common` stream) belongs to the actor whose token opened
/// it; another actor who learns its id gets 404, as for a session that does not exist.
#[tokio::test]
async fn a_session_belongs_to_the_actor_that_opened_it() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("hygiene-session-actor");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let url = format!("http://{}/mcp", served.addr());
    let (status, headers, _) = post(&url, initialize(), &[]).await;
    assert_eq!(status, StatusCode::OK);
    let session = headers["mcp-session-id"].to_str().unwrap().to_string();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let as_actor = |token: &'static str| {
        let url = url.clone();
        let session = session.clone();
        let list = list.clone();
        async move {
            crate::harness::http_client()
                .post(&url)
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", "2025-06-18")
                .body(list)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(
        as_actor(crate::harness::OPS_TOKEN).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(as_actor(BILLING_TOKEN).await, StatusCode::OK);
    // The session's standalone stream, resumed by the other actor: refused too.
    let common = crate::harness::http_client()
        .get(&url)
        .header(
            "authorization",
            format!("Bearer {}", crate::harness::OPS_TOKEN),
        )
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("last-event-id", format!("{session}:common/0"))
        .send()
        .await
        .unwrap();
    assert_eq!(common.status(), StatusCode::NOT_FOUND);
    // Still refused after a restart: the binding is in the ledger.
    let addr = served.addr().to_string();
    served.stop();
    let restarted = Served::spawn(&dir.0, &addr);
    let url = format!("http://{}/mcp", restarted.addr());
    let status = crate::harness::http_client()
        .post(&url)
        .header(
            "authorization",
            format!("Bearer {}", crate::harness::OPS_TOKEN),
        )
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .body(list.clone())
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, StatusCode::NOT_FOUND);
}

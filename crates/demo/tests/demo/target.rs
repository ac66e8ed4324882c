//! The demo invoice API, driven with hand-written HTTP/1.1 over a raw TCP stream.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use postern_demo::target::{InvoiceApi, Mode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

#[derive(Debug)]
struct Answer {
    status: u16,
    body: Value,
}

/// Sends one request (`Connection: close`) and reads the whole answer. `Ok(None)`: the server
/// closed the connection without a response.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> io::Result<Option<Answer>> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str("content-type: application/json\r\n");
    }
    request.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(None),
        Err(e) => return Err(e),
    }
    if raw.is_empty() {
        return Ok(None);
    }
    let text = String::from_utf8(raw).expect("utf-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete head");
    let status = head
        .split(' ')
        .nth(1)
        .expect("status")
        .parse()
        .expect("numeric status");
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).expect("JSON body")
    };
    Ok(Some(Answer { status, body }))
}

async fn post(addr: SocketAddr, key: Option<&str>, body: Value) -> Answer {
    let headers: Vec<(&str, &str)> = key.map(|k| ("idempotency-key", k)).into_iter().collect();
    send(addr, "POST", "/invoices", &headers, Some(body))
        .await
        .unwrap()
        .expect("an answer")
}

async fn get(addr: SocketAddr, path: &str) -> Answer {
    send(addr, "GET", path, &[], None)
        .await
        .unwrap()
        .expect("an answer")
}

fn acme(amount: i64) -> Value {
    json!({ "customer": "acme", "amount": amount })
}

#[tokio::test]
async fn a_repeated_idempotency_key_replays_the_same_invoice_and_creates_nothing() {
    let api = InvoiceApi::start().await.unwrap();
    let first = post(api.addr, Some("k1"), acme(100)).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body["id"], "inv_1");
    assert_eq!(first.body["currency"], "USD");
    assert_eq!(first.body["idempotency_key"], "k1");
    let replay = post(api.addr, Some("k1"), acme(100)).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.body, first.body);
    assert_eq!(api.state.count_for("acme"), 1);

    // A new key, or none, is a new invoice.
    assert_eq!(
        post(api.addr, Some("k2"), acme(100)).await.body["id"],
        "inv_2"
    );
    let keyless = post(
        api.addr,
        None,
        json!({"customer": "acme", "amount": 5, "currency": "EUR"}),
    )
    .await;
    assert_eq!(
        (keyless.status, &keyless.body["id"]),
        (201, &json!("inv_3"))
    );
    assert_eq!(keyless.body["currency"], "EUR");
    assert_eq!(api.state.count_for("acme"), 3);
    assert_eq!(api.state.count_for("globex"), 0);

    let seen = api.state.requests();
    assert_eq!(seen.len(), 4);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("POST", "/invoices")
    );
    assert_eq!(seen[1].idempotency_key.as_deref(), Some("k1"));
    assert_eq!(seen[3].idempotency_key, None);
    assert!(!seen[0].has_authorization);
    assert_eq!(
        serde_json::from_str::<Value>(&seen[0].body).unwrap(),
        acme(100)
    );

    api.state.reset();
    assert!(api.state.invoices().is_empty() && api.state.requests().is_empty());
    assert_eq!(
        post(api.addr, Some("k1"), acme(1)).await.body["id"],
        "inv_1"
    );
}

#[tokio::test]
async fn a_negative_amount_is_422_and_creates_nothing() {
    let api = InvoiceApi::start().await.unwrap();
    let answer = post(api.addr, Some("k"), acme(-1)).await;
    assert_eq!(answer.status, 422);
    assert_eq!(answer.body, json!({"error": "amount must be positive"}));
    assert_eq!(post(api.addr, None, json!({"amount": 1})).await.status, 400);
    assert!(api.state.invoices().is_empty());
    // The refused key was not consumed.
    assert_eq!(post(api.addr, Some("k"), acme(1)).await.status, 201);
}

#[tokio::test]
async fn the_status_query_finds_an_invoice_by_idempotency_key() {
    let api = InvoiceApi::start().await.unwrap();
    let missing = get(api.addr, "/invoices?idempotency_key=exe_1").await;
    assert_eq!(
        (missing.status, missing.body),
        (404, json!({"error": "not found"}))
    );
    let created = post(api.addr, Some("exe_1"), acme(7)).await;
    let found = get(api.addr, "/invoices?idempotency_key=exe_1").await;
    assert_eq!((found.status, &found.body), (200, &created.body));

    assert_eq!(get(api.addr, "/invoices/inv_1").await.body, created.body);
    assert_eq!(get(api.addr, "/invoices/inv_9").await.status, 404);
    let list = get(api.addr, "/invoices").await;
    assert_eq!(
        (list.status, list.body),
        (200, json!({ "invoices": [created.body] }))
    );
    assert_eq!(
        api.state.requests()[0].query.as_deref(),
        Some("idempotency_key=exe_1")
    );
}

#[tokio::test]
async fn a_token_api_refuses_requests_without_the_bearer_token() {
    let api = InvoiceApi::start_with_token("s3cret").await.unwrap();
    let body = Some(acme(1));
    let none = send(api.addr, "POST", "/invoices", &[], body.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (none.status, none.body),
        (401, json!({"error": "unauthorized"}))
    );
    let wrong = [("authorization", "Bearer nope")];
    assert_eq!(
        send(api.addr, "POST", "/invoices", &wrong, body.clone())
            .await
            .unwrap()
            .unwrap()
            .status,
        401
    );
    assert_eq!(
        send(api.addr, "GET", "/invoices", &wrong, None)
            .await
            .unwrap()
            .unwrap()
            .status,
        401
    );
    assert!(api.state.invoices().is_empty());

    let right = [("authorization", "Bearer s3cret")];
    assert_eq!(
        send(api.addr, "POST", "/invoices", &right, body)
            .await
            .unwrap()
            .unwrap()
            .status,
        201
    );
    assert_eq!(
        send(api.addr, "GET", "/invoices/inv_1", &right, None)
            .await
            .unwrap()
            .unwrap()
            .status,
        200
    );
    let auth: Vec<bool> = api
        .state
        .requests()
        .iter()
        .map(|r| r.has_authorization)
        .collect();
    assert_eq!(auth, [false, true, true, true, true]);
}

#[tokio::test]
async fn hang_after_create_applies_the_invoice_and_the_client_times_out() {
    let api = InvoiceApi::start().await.unwrap();
    api.state.set_mode(Mode::HangAfterCreate);
    let call = send(
        api.addr,
        "POST",
        "/invoices",
        &[("idempotency-key", "exe_1")],
        Some(acme(9)),
    );
    assert!(
        timeout(Duration::from_millis(500), call).await.is_err(),
        "no answer expected"
    );
    assert_eq!(api.state.count_for("acme"), 1, "the target applied it");
    // The status query still answers, and reveals the applied invoice.
    let found = get(api.addr, "/invoices?idempotency_key=exe_1").await;
    assert_eq!((found.status, &found.body["id"]), (200, &json!("inv_1")));
    // The mode stays until changed.
    let again = send(api.addr, "POST", "/invoices", &[], Some(acme(9)));
    assert!(timeout(Duration::from_millis(300), again).await.is_err());
    assert_eq!(api.state.count_for("acme"), 2);
}

#[tokio::test]
async fn hang_once_hangs_one_post_and_the_same_key_then_replays() {
    let api = InvoiceApi::start().await.unwrap();
    api.state.set_mode(Mode::HangOnce);
    let call = send(
        api.addr,
        "POST",
        "/invoices",
        &[("idempotency-key", "exe_1")],
        Some(acme(9)),
    );
    assert!(timeout(Duration::from_millis(500), call).await.is_err());
    let redispatch = post(api.addr, Some("exe_1"), acme(9)).await;
    assert_eq!(
        (redispatch.status, &redispatch.body["id"]),
        (200, &json!("inv_1"))
    );
    assert_eq!(api.state.count_for("acme"), 1);
}

#[tokio::test]
async fn fail500_answers_500_and_creates_nothing() {
    let api = InvoiceApi::start().await.unwrap();
    api.state.set_mode(Mode::Fail500);
    let answer = post(api.addr, Some("k"), acme(3)).await;
    assert_eq!(answer.status, 500);
    assert_eq!(post(api.addr, Some("k"), acme(3)).await.status, 500);
    assert!(api.state.invoices().is_empty());
    api.state.set_mode(Mode::Normal);
    assert_eq!(post(api.addr, Some("k"), acme(3)).await.status, 201);
}

#[tokio::test]
async fn drop_after_create_applies_the_invoice_and_closes_without_a_response() {
    let api = InvoiceApi::start().await.unwrap();
    api.state.set_mode(Mode::DropAfterCreate);
    let call = send(
        api.addr,
        "POST",
        "/invoices",
        &[("idempotency-key", "k")],
        Some(acme(4)),
    );
    let answer = timeout(Duration::from_secs(5), call)
        .await
        .expect("closed promptly")
        .unwrap();
    assert!(answer.is_none(), "no response expected, got {answer:?}");
    assert_eq!(api.state.count_for("acme"), 1);
    api.state.set_mode(Mode::Normal);
    assert_eq!(post(api.addr, Some("k"), acme(4)).await.status, 200);
}

#[tokio::test]
async fn dropping_the_handle_closes_a_hanging_connection_without_answering_late() {
    let api = InvoiceApi::start().await.unwrap();
    let (addr, state) = (api.addr, api.state.clone());
    state.set_mode(Mode::HangAfterCreate);
    let call = tokio::spawn(send(addr, "POST", "/invoices", &[], Some(acme(2))));
    while state.count_for("acme") == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(api);
    let answer = timeout(Duration::from_secs(5), call)
        .await
        .expect("closed on shutdown");
    assert!(answer.unwrap().unwrap().is_none());
}

//! Nothing useful came back: the outcome must say honestly whether the request may have
//! reached the target.

use std::time::{Duration, Instant};

use postern_channels::http::{Credential, HttpChannel, HttpOutcome, Secret};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::support::{answered, dispatch, AfterRead, RawServer, TestServer};

fn not_sent(outcome: HttpOutcome) -> String {
    match outcome {
        HttpOutcome::NotSent { reason } => reason,
        other => panic!("expected NotSent, got {other:?}"),
    }
}

fn unknown(outcome: HttpOutcome) -> String {
    match outcome {
        HttpOutcome::Unknown { reason } => reason,
        other => panic!("expected Unknown, got {other:?}"),
    }
}

#[tokio::test]
async fn connection_refused_is_not_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let channel = HttpChannel::new();
    let mut req = dispatch("POST", format!("http://{addr}/invoices"));
    req.idempotency = Some(("Idempotency-Key".to_string(), "exe_1".to_string()));
    let reason = not_sent(channel.dispatch(req).await);
    assert!(reason.contains("connect"), "{reason}");
    assert!(
        !reason.contains("/invoices"),
        "the URL is left out: {reason}"
    );
}

/// A listener whose accept queue is full: Linux drops further SYNs, so a new connection
/// hangs in the handshake. Returns the address and what must be kept alive.
async fn full_backlog() -> (std::net::SocketAddr, TcpListener, Vec<TcpStream>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..64 {
        match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => held.push(stream),
            Ok(Err(e)) => panic!("filling the backlog: {e}"),
            Err(_) => return (addr, listener, held),
        }
    }
    panic!("the accept queue never filled");
}

#[tokio::test]
async fn a_connect_timeout_is_not_sent_even_when_the_response_timeout_is_shorter() {
    let (addr, _listener, _held) = full_backlog().await;
    let channel = HttpChannel::new();
    let mut req = dispatch("POST", format!("http://{addr}/deploy"));
    req.connect_timeout = Duration::from_millis(300);
    req.response_timeout = Duration::from_millis(20);
    let started = Instant::now();
    let reason = not_sent(channel.dispatch(req).await);
    assert!(reason.contains("connect timed out"), "{reason}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn no_answer_within_the_response_timeout_is_unknown_and_the_request_arrived() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let mut req = dispatch("POST", server.url("/slow/3000"));
    req.body = Some(b"{}".to_vec());
    req.idempotency = Some(("Idempotency-Key".to_string(), "exe_slow".to_string()));
    req.connect_timeout = Duration::from_millis(200);
    req.response_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let reason = unknown(channel.dispatch(req).await);
    assert!(reason.contains("no answer"), "{reason}");
    assert!(started.elapsed() < Duration::from_millis(2500));
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "the server received the request");
    assert_eq!(seen[0].headers["idempotency-key"], "exe_slow");
}

#[tokio::test]
async fn a_close_after_the_request_was_read_is_unknown() {
    let server = RawServer::start(AfterRead::Close).await;
    let channel = HttpChannel::new();
    let mut req = dispatch("POST", server.url("/charge"));
    req.body = Some(br#"{"amount":1}"#.to_vec());
    let reason = unknown(channel.dispatch(req).await);
    assert!(reason.contains("after it was established"), "{reason}");
    assert_eq!(server.count(), 1);
}

#[tokio::test]
async fn a_reset_after_the_request_was_read_is_unknown() {
    let server = RawServer::start(AfterRead::Reset).await;
    let channel = HttpChannel::new();
    let mut req = dispatch("DELETE", server.url("/things/9"));
    req.idempotency = Some(("Idempotency-Key".to_string(), "exe_2".to_string()));
    unknown(channel.dispatch(req).await);
    assert_eq!(server.count(), 1);
}

#[tokio::test]
async fn a_reset_right_after_connecting_is_still_unknown() {
    // The target reset before reading, so in fact nothing was processed — but from the client
    // side a reset after the connection was up cannot be proven to precede the request bytes
    // reaching the target, so the channel does not claim NotSent.
    let server = RawServer::start(AfterRead::ResetOnAccept).await;
    let channel = HttpChannel::new();
    unknown(channel.dispatch(dispatch("POST", server.url("/x"))).await);
    assert_eq!(server.count(), 0);
}

#[tokio::test]
async fn a_body_cut_short_keeps_the_status_and_says_so() {
    let server = RawServer::start(AfterRead::CutBody).await;
    let channel = HttpChannel::new();
    let answer = answered(
        channel
            .dispatch(dispatch("POST", server.url("/create")))
            .await,
    );
    assert_eq!(answer.status, 201);
    assert_eq!(answer.body, br#"{"id":"in"#);
    assert_eq!(answer.size, 9);
    assert!(answer.truncated);
    assert!(answer.body_error.is_some(), "{answer:?}");
}

#[tokio::test]
async fn a_body_that_outlasts_the_deadline_keeps_the_status() {
    // Headers come at once; the body never ends, so the deadline stops the read.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = stream.read(&mut buf).await.unwrap();
        let head = "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nabc";
        stream.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let channel = HttpChannel::new();
    let mut req = dispatch("GET", format!("http://{addr}/stream"));
    req.connect_timeout = Duration::from_millis(100);
    req.response_timeout = Duration::from_millis(300);
    let answer = answered(channel.dispatch(req).await);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, b"abc");
    assert!(answer.truncated);
    assert_eq!(
        answer.body_error.as_deref(),
        Some("timed out reading the body")
    );
}

#[tokio::test]
async fn requests_that_cannot_be_built_are_not_sent() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();

    let reason = not_sent(channel.dispatch(dispatch("PO ST", server.url("/x"))).await);
    assert!(reason.contains("method"), "{reason}");

    let reason = not_sent(
        channel
            .dispatch(dispatch("GET", "not a url".to_string()))
            .await,
    );
    assert!(reason.contains("url"), "{reason}");

    let ftp = format!("ftp://{}/x", server.addr);
    let reason = not_sent(channel.dispatch(dispatch("GET", ftp)).await);
    assert!(reason.contains("only http and https"), "{reason}");

    let mut req = dispatch("GET", server.url("/x"));
    req.credential = Some(Credential::Bearer(Secret::new("line\nbreak-secret")));
    let reason = not_sent(channel.dispatch(req).await);
    assert!(reason.contains("credential"), "{reason}");
    assert!(!reason.contains("break-secret"), "{reason}");

    assert!(server.seen().is_empty());
}

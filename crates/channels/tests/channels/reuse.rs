//! Connection reuse keeps the classification honest: a kept-alive connection the target closed
//! before a request was written never makes that request look sent (it goes out on a new
//! connection, or is `NotSent` when none can be made), and a connection that fails once the
//! request has started to go out is `Unknown`, never `NotSent` and never silently re-sent.

use std::sync::Arc;
use std::time::Duration;

use postern_channels::http::{ConnectionReuse, HttpChannel, HttpOutcome, TlsProfile};
use postern_testkit::{TestCa, Validity};

use crate::support::{answered, dispatch};
use crate::tls::trusting;
use crate::tls_servers::{ScriptedTlsServer, Step};

/// A scripted TLS server and a profile that trusts it.
async fn server(script: Vec<Step>) -> (ScriptedTlsServer, Arc<TlsProfile>) {
    let ca = TestCa::new("Postern test CA");
    let cert = ca.server_cert(&["127.0.0.1"], Validity::Current);
    let server = ScriptedTlsServer::start(cert.server_config(), script).await;
    (server, trusting(&ca, None))
}

fn post(server: &ScriptedTlsServer, tls: &Arc<TlsProfile>) -> postern_channels::http::HttpDispatch {
    let mut req = dispatch("POST", server.url("/invoices"));
    req.body = Some(b"{}".to_vec());
    req.idempotency = Some(("Idempotency-Key".to_string(), "exe_reuse".to_string()));
    req.tls = Some(tls.clone());
    req
}

#[tokio::test]
async fn sequential_requests_share_one_connection() {
    let (server, tls) = server(Vec::new()).await;
    let channel = HttpChannel::new();
    for _ in 0..3 {
        answered(channel.dispatch(post(&server, &tls)).await);
    }
    assert_eq!(server.read(), 3);
    assert_eq!(
        server.connections(),
        1,
        "one TLS handshake for three requests"
    );
}

#[tokio::test]
async fn without_reuse_every_request_has_its_own_connection() {
    let (server, tls) = server(Vec::new()).await;
    let channel = HttpChannel::with_reuse(ConnectionReuse::FreshEveryRequest);
    for _ in 0..3 {
        answered(channel.dispatch(post(&server, &tls)).await);
    }
    assert_eq!(server.connections(), 3);
}

#[tokio::test]
async fn a_pooled_connection_the_target_closed_is_not_used_and_the_request_goes_once() {
    let close = Duration::from_millis(50);
    let (server, tls) = server(vec![Step::AnswerThenCloseAfter(close)]).await;
    let channel = HttpChannel::new();
    answered(channel.dispatch(post(&server, &tls)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    answered(channel.dispatch(post(&server, &tls)).await);
    assert_eq!(
        server.connections(),
        2,
        "a new connection for the second request"
    );
    assert_eq!(server.started(), 2, "each request went out once");
    assert_eq!(server.read(), 2);
}

#[tokio::test]
async fn a_pooled_connection_closed_by_a_target_now_down_is_not_sent() {
    let close = Duration::from_millis(50);
    let (server, tls) = server(vec![Step::AnswerThenGoDown(close)]).await;
    let channel = HttpChannel::new();
    answered(channel.dispatch(post(&server, &tls)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    match channel.dispatch(post(&server, &tls)).await {
        HttpOutcome::NotSent { reason } => assert!(reason.contains("connect"), "{reason}"),
        other => panic!("expected NotSent, got {other:?}"),
    }
    assert_eq!(server.started(), 1, "the second request reached nothing");
}

/// The second request goes out on the kept-alive connection, which the target then cuts
/// (`step`) while the request is arriving.
async fn cut_while_written(step: Step) {
    let (server, tls) = server(vec![Step::Answer, step]).await;
    let channel = HttpChannel::new();
    answered(channel.dispatch(post(&server, &tls)).await);
    match channel.dispatch(post(&server, &tls)).await {
        HttpOutcome::Unknown { reason } => {
            assert!(reason.contains("after it was established"), "{reason}")
        }
        other => panic!("expected Unknown, got {other:?}"),
    }
    assert_eq!(server.started(), 2, "the second request started to arrive");
    assert_eq!(
        server.connections(),
        1,
        "and was not sent again on a new connection"
    );
}

#[tokio::test]
async fn a_pooled_connection_reset_while_the_request_is_written_is_unknown() {
    cut_while_written(Step::ResetWhenItStarts).await;
}

#[tokio::test]
async fn a_pooled_connection_closed_while_the_request_is_written_is_unknown() {
    cut_while_written(Step::CloseWhenItStarts).await;
}

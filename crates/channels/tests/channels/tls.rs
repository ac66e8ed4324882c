//! `https://` targets: real rustls servers on 127.0.0.1 with certificates from a CA made for
//! the test. A handshake that fails for any reason is `NotSent`, naming the reason and the host
//! (never the URL's path or query); the target saw no request.

use std::sync::Arc;

use postern_channels::http::{
    ClientIdentity, Credential, HttpChannel, HttpOutcome, Secret, TlsProfile, TrustedRoots,
};
use postern_channels::ChannelError;
use postern_testkit::{TestCa, Validity};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{answered, dispatch, TestServer};
use crate::tls_servers::{ScriptedTlsServer, Step};

const LOOPBACK: &[&str] = &["localhost", "127.0.0.1"];

/// A profile trusting `ca` only, with an optional client certificate.
pub fn trusting(ca: &TestCa, client: Option<&ClientIdentity>) -> Arc<TlsProfile> {
    let roots = TrustedRoots::from_pem(ca.cert_pem().as_bytes()).unwrap();
    Arc::new(TlsProfile::new(&roots, client).unwrap())
}

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

/// A POST to `url` with a body, a credential and an idempotency key, whose URL carries an
/// argument in its path and query that must never show in a reason.
fn invoice(url: String, tls: Option<Arc<TlsProfile>>) -> postern_channels::http::HttpDispatch {
    let mut req = dispatch("POST", url);
    req.body = Some(br#"{"amount":42}"#.to_vec());
    req.credential = Some(Credential::Bearer(Secret::new("tok-secret-123")));
    req.idempotency = Some(("Idempotency-Key".to_string(), "exe_tls".to_string()));
    req.tls = tls;
    req
}

#[tokio::test]
async fn an_https_target_with_its_ca_configured_answers() {
    let ca = TestCa::new("Postern test CA");
    let cert = ca.server_cert(LOOPBACK, Validity::Current);
    let server = TestServer::start_tls(cert.server_config()).await;
    let channel = HttpChannel::new();
    let req = invoice(
        server.url("/invoices/acme-7?ref=q-arg"),
        Some(trusting(&ca, None)),
    );
    let answer = answered(channel.dispatch(req).await);
    assert_eq!(answer.status, 200);
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].headers["idempotency-key"], "exe_tls");
    assert_eq!(seen[0].headers["authorization"], "Bearer tok-secret-123");
    assert_eq!(&seen[0].body[..], br#"{"amount":42}"#);
}

/// Dispatches to a TLS server presenting `cert` (by default trusting nothing but the webpki
/// roots); returns the NotSent reason after checking the server saw no request.
async fn refused_handshake(
    config: Arc<rustls::ServerConfig>,
    tls: Option<Arc<TlsProfile>>,
) -> String {
    let server = TestServer::start_tls(config).await;
    let channel = HttpChannel::new();
    let reason = not_sent(
        channel
            .dispatch(invoice(server.url("/invoices/acme-7?ref=q-arg"), tls))
            .await,
    );
    assert!(server.seen().is_empty(), "nothing reached the target");
    assert!(
        reason.contains("TLS handshake with 127.0.0.1 failed"),
        "{reason}"
    );
    for leak in ["acme-7", "q-arg", "/invoices", "tok-secret"] {
        assert!(!reason.contains(leak), "{leak} in {reason}");
    }
    reason
}

#[tokio::test]
async fn a_ca_not_configured_is_not_sent_unknown_ca() {
    let ca = TestCa::new("Private CA");
    let cert = ca.server_cert(LOOPBACK, Validity::Current);
    let reason = refused_handshake(cert.server_config(), None).await;
    assert!(
        reason.contains("certificate not trusted (unknown CA)"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_certificate_for_another_host_is_not_sent() {
    let ca = TestCa::new("Postern test CA");
    let cert = ca.server_cert(&["other.example"], Validity::Current);
    let reason = refused_handshake(cert.server_config(), Some(trusting(&ca, None))).await;
    assert!(
        reason.contains("not valid for the host name 127.0.0.1 (wrong host)"),
        "{reason}"
    );
}

#[tokio::test]
async fn an_expired_certificate_is_not_sent() {
    let ca = TestCa::new("Postern test CA");
    let cert = ca.server_cert(LOOPBACK, Validity::Expired);
    let reason = refused_handshake(cert.server_config(), Some(trusting(&ca, None))).await;
    assert!(reason.contains("certificate expired"), "{reason}");
}

#[tokio::test]
async fn a_target_that_does_not_speak_tls_is_not_sent() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let url = format!("https://{}/invoices?ref=q-arg", server.addr);
    let reason = not_sent(channel.dispatch(invoice(url, None)).await);
    assert!(reason.contains("does not speak TLS"), "{reason}");
    assert!(!reason.contains("q-arg"), "{reason}");
    assert!(server.seen().is_empty());
}

#[tokio::test]
async fn no_tls_version_in_common_is_not_sent() {
    // A target that only speaks an older TLS answers the ClientHello with a fatal
    // protocol_version alert.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut hello = [0u8; 1024];
        let _ = tcp.read(&mut hello).await;
        let alert = [0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x46];
        let _ = tcp.write_all(&alert).await;
        let _ = tcp.shutdown().await;
    });
    let channel = HttpChannel::new();
    let reason = not_sent(
        channel
            .dispatch(invoice(format!("https://{addr}/x"), None))
            .await,
    );
    assert!(reason.contains("no TLS version in common"), "{reason}");
}

#[tokio::test]
async fn a_handshake_that_never_finishes_is_a_connect_timeout_and_not_sent() {
    // TCP is accepted; the ClientHello is never answered. The connect timeout covers the
    // handshake: the request was never written, whatever the response timeout says.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        drop(tcp);
    });
    let channel = HttpChannel::new();
    let mut req = invoice(format!("https://{addr}/x"), None);
    req.connect_timeout = std::time::Duration::from_millis(300);
    req.response_timeout = std::time::Duration::from_millis(20);
    let reason = not_sent(channel.dispatch(req).await);
    assert!(reason.contains("connect timed out"), "{reason}");
    assert!(reason.contains("TLS handshake"), "{reason}");
}

#[tokio::test]
async fn mtls_with_the_client_certificate_answers() {
    let ca = TestCa::new("Postern test CA");
    let clients = TestCa::new("Client CA");
    let cert = ca.server_cert(LOOPBACK, Validity::Current);
    let server = TestServer::start_tls(cert.server_config_requiring_client(&clients)).await;
    let client = clients.client_cert("billing-agent");
    let identity =
        ClientIdentity::from_pem(client.cert_pem.as_bytes(), &Secret::new(client.key_pem)).unwrap();
    let channel = HttpChannel::new();
    let req = invoice(
        server.url("/invoices"),
        Some(trusting(&ca, Some(&identity))),
    );
    assert_eq!(answered(channel.dispatch(req).await).status, 200);
    assert_eq!(server.seen().len(), 1);
}

/// A server requiring a client certificate from `clients`, dialled with `identity` (or none)
/// over `versions`: the handshake is refused and nothing reaches the application.
async fn mtls_refused(
    identity: Option<&ClientIdentity>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> String {
    let ca = TestCa::new("Postern test CA");
    let clients = TestCa::new("Client CA");
    let cert = ca.server_cert(LOOPBACK, Validity::Current);
    let server = TestServer::start_tls(cert.server_config_with(Some(&clients), versions)).await;
    let channel = HttpChannel::new();
    let req = invoice(
        server.url("/invoices?ref=q-arg"),
        Some(trusting(&ca, identity)),
    );
    let reason = not_sent(channel.dispatch(req).await);
    assert!(server.seen().is_empty(), "nothing reached the application");
    assert_eq!(server.failed_handshakes(), 1);
    assert!(!reason.contains("q-arg"), "{reason}");
    reason
}

#[tokio::test]
async fn mtls_without_a_client_certificate_is_not_sent_over_tls_1_3() {
    // TLS 1.3: the client's handshake is over before the server checks for a certificate, so
    // the request is written; the server's certificate_required alert proves it read none of it.
    let reason = mtls_refused(None, &[&rustls::version::TLS13]).await;
    assert!(reason.contains("requires a client certificate"), "{reason}");
}

#[tokio::test]
async fn mtls_without_a_client_certificate_is_not_sent_over_tls_1_2() {
    let reason = mtls_refused(None, &[&rustls::version::TLS12]).await;
    assert!(
        reason.contains("TLS handshake with 127.0.0.1 failed"),
        "{reason}"
    );
}

#[tokio::test]
async fn mtls_with_a_certificate_from_another_ca_is_not_sent() {
    let stranger = TestCa::new("Some other CA").client_cert("billing-agent");
    let identity =
        ClientIdentity::from_pem(stranger.cert_pem.as_bytes(), &Secret::new(stranger.key_pem))
            .unwrap();
    let reason = mtls_refused(Some(&identity), &[&rustls::version::TLS13]).await;
    assert!(
        reason.contains("refused our client certificate"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_reset_after_the_request_was_read_over_tls_is_unknown() {
    let ca = TestCa::new("Postern test CA");
    let cert = ca.server_cert(LOOPBACK, Validity::Current);
    let server =
        ScriptedTlsServer::start(cert.server_config(), vec![Step::ResetAfterReading]).await;
    let channel = HttpChannel::new();
    let reason = unknown(
        channel
            .dispatch(invoice(server.url("/invoices"), Some(trusting(&ca, None))))
            .await,
    );
    assert!(reason.contains("after it was established"), "{reason}");
    assert_eq!(server.read(), 1);
}

#[test]
fn a_ca_file_without_a_certificate_is_refused() {
    let err = TrustedRoots::from_pem(b"just some text\n").unwrap_err();
    assert!(matches!(err, ChannelError::Tls { .. }), "{err:?}");
    assert!(
        err.to_string().contains("holds no PEM certificate"),
        "{err}"
    );
    let key_only = TestCa::new("CA").client_cert("x").key_pem;
    let err = TrustedRoots::from_pem(key_only.as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("holds no PEM certificate"),
        "{err}"
    );
}

#[test]
fn a_client_key_that_does_not_match_its_certificate_is_refused() {
    let ca = TestCa::new("CA");
    let (one, other) = (ca.client_cert("one"), ca.client_cert("other"));
    let err =
        ClientIdentity::from_pem(one.cert_pem.as_bytes(), &Secret::new(other.key_pem)).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");

    let err =
        ClientIdentity::from_pem(one.cert_pem.as_bytes(), &Secret::new("not a key")).unwrap_err();
    assert!(err.to_string().contains("not a PEM private key"), "{err}");
    assert!(
        !err.to_string().contains("not a key"),
        "the content is not echoed: {err}"
    );

    let err = ClientIdentity::from_pem(b"", &Secret::new(one.key_pem)).unwrap_err();
    assert!(
        err.to_string().contains("holds no PEM certificate"),
        "{err}"
    );
}

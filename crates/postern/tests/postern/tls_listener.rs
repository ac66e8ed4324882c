//! The MCP listener over TLS (issue 13): a real `postern serve` with `[gateway] tls`, a
//! certificate from a CA the test makes, real clients (reqwest, curl, raw rustls) on loopback.
//! HTTP/2 and HTTP/1.1 by ALPN, plain HTTP to the TLS port answered clearly, the certificate
//! replaced on SIGHUP without dropping open connections, actors pinned to client certificates,
//! and the start-up errors for bad files.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use postern_demo::target::{InvoiceApi, InvoiceApiHandle};
use postern_testkit::{Issued, TestCa, Validity};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{
    config, execution, http_builder, write_private, Dir, Mcp, Served, BILLING_TOKEN,
};

/// The harness config with `[gateway] tls` naming `gw.pem` and `gw.key`.
pub fn tls_config(target: &str) -> String {
    config(target).replacen(
        "[gateway]\n",
        "[gateway]\ntls = { cert = \"gw.pem\", key = \"gw.key\" }\n",
        1,
    )
}

/// A gateway serving MCP over TLS in front of the invoice API, with its CA's certificate in
/// `ca.pem`.
pub struct TlsGateway {
    pub target: InvoiceApiHandle,
    pub dir: Dir,
    pub served: Served,
    pub ca: TestCa,
    pub ca_file: PathBuf,
}

/// Starts one; `edit` changes the config text first.
pub async fn tls_gateway(tag: &str, edit: impl Fn(String) -> String) -> TlsGateway {
    tls_gateway_in(Dir::new(tag), edit).await
}

/// As [`tls_gateway`], in a directory the caller may have put files in.
pub async fn tls_gateway_in(dir: Dir, edit: impl Fn(String) -> String) -> TlsGateway {
    let target = InvoiceApi::start().await.unwrap();
    let ca = TestCa::new("gateway test CA");
    let ca_file = ca.write_pem(&dir.0, "ca.pem");
    server_cert(&ca).write_pem(&dir.0, "gw.pem", "gw.key");
    let text = edit(tls_config(&format!("http://{}", target.addr)));
    let served = Served::start(&dir.0, &text);
    assert!(served.url.starts_with("https://"), "{}", served.url);
    TlsGateway {
        target,
        dir,
        served,
        ca,
        ca_file,
    }
}

fn server_cert(ca: &TestCa) -> Issued {
    ca.server_cert(&["127.0.0.1", "localhost"], Validity::Current)
}

/// A reqwest client that trusts only `ca`.
pub fn trusting(ca: &TestCa) -> reqwest::ClientBuilder {
    http_builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap()])
}

fn identity(issued: &Issued) -> reqwest::Identity {
    reqwest::Identity::from_pem(format!("{}{}", issued.cert_pem, issued.key_pem).as_bytes())
        .unwrap()
}

/// `curl` over https trusting `ca_file`, with extra arguments; returns (exit code, stdout).
fn curl(ca_file: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca_file)
        .args(args)
        .output()
        .expect("curl is installed");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_is_served_over_tls_by_http2_and_http1_and_plain_http_gets_a_clear_answer() {
    let gw = tls_gateway("tls-serve", |t| t).await;
    let mcp = Mcp::connect_with(
        trusting(&gw.ca).build().unwrap(),
        &gw.served.url,
        BILLING_TOKEN,
    )
    .await
    .unwrap();
    let answer = mcp
        .call(
            "create_invoice",
            json!({"customer": "tls-co", "amount": 7}),
            json!({}),
        )
        .await;
    assert_eq!(execution(&answer)["state"], "completed", "{answer}");
    let seen = gw.target.state.requests();
    let id = execution(&answer)["execution_id"].as_str().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].idempotency_key.as_deref(), Some(id));

    // ALPN: curl asks for h2 and gets it; and HTTP/1.1 when it asks for that only.
    let health = format!("https://{}/healthz", gw.served.addr());
    for (flag, want) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let (code, out) = curl(&gw.ca_file, &[flag, "-w", "|%{http_version}", &health]);
        assert_eq!(code, 0, "{flag}: {out}");
        assert_eq!(out, format!("ok|{want}"), "{flag}");
    }
    // The host name is verified: a name the certificate does not carry is refused by curl.
    let port = gw.served.addr().rsplit_once(':').unwrap().1.to_string();
    let (code, _) = curl(
        &gw.ca_file,
        &[
            "--resolve",
            &format!("other.test:{port}:127.0.0.1"),
            &format!("https://other.test:{port}/healthz"),
        ],
    );
    assert_ne!(code, 0, "a certificate for another name was accepted");

    // Plain HTTP to the TLS port: a 400 that says what to do, and the gateway serves on.
    let plain = http_builder()
        .build()
        .unwrap()
        .get(format!("http://{}/healthz", gw.served.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 400);
    assert!(plain.text().await.unwrap().contains("use https://"));
    let (code, out) = curl(&gw.ca_file, &[&health]);
    assert_eq!((code, out.as_str()), (0, "ok"));
}

/// A TLS client that trusts `roots`, on a connection of its own.
async fn tls_connect(addr: &str, roots: &[&TestCa]) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut store = rustls::RootCertStore::empty();
    for ca in roots {
        store.add(ca.cert_der()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(postern_testkit::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap()
}

/// The certificate a new handshake is shown.
async fn presented(addr: &str, roots: &[&TestCa]) -> CertificateDer<'static> {
    let tls = tls_connect(addr, roots).await;
    tls.get_ref().1.peer_certificates().unwrap()[0].clone()
}

/// `GET /healthz` on a kept-alive HTTP/1.1 connection; the body.
async fn health_on(tls: &mut tokio_rustls::client::TlsStream<TcpStream>) -> String {
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).ends_with("ok") {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert!(
            n > 0,
            "the connection was closed: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

fn hangup(served: &Served) {
    let status = Command::new("kill")
        .args(["-HUP", &served.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_replaces_the_certificate_and_keeps_open_connections() {
    let gw = tls_gateway("tls-reload", |t| t).await;
    let addr = gw.served.addr().to_string();
    let old = presented(&addr, &[&gw.ca]).await;
    let mut open = tls_connect(&addr, &[&gw.ca]).await;
    assert!(health_on(&mut open).await.starts_with("HTTP/1.1 200"));

    // A new certificate from another CA, written over the files, then SIGHUP.
    let renewed_ca = TestCa::new("renewed CA");
    let renewed = server_cert(&renewed_ca);
    renewed.write_pem(&gw.dir.0, "gw.pem.new", "gw.key.new");
    std::fs::rename(gw.dir.0.join("gw.pem.new"), gw.dir.0.join("gw.pem")).unwrap();
    std::fs::rename(gw.dir.0.join("gw.key.new"), gw.dir.0.join("gw.key")).unwrap();
    hangup(&gw.served);
    let mut now = None;
    for _ in 0..100 {
        let cert = presented(&addr, &[&gw.ca, &renewed_ca]).await;
        if cert != old {
            now = Some(cert);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let now = now.expect("the renewed certificate is served within 5 s of SIGHUP");
    // The connection opened under the old certificate still answers.
    assert!(health_on(&mut open).await.starts_with("HTTP/1.1 200"));

    // A key that is not the certificate's: refused, the renewed certificate stays.
    let stranger = server_cert(&renewed_ca);
    std::fs::write(gw.dir.0.join("gw.key"), &stranger.key_pem).unwrap();
    hangup(&gw.served);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(presented(&addr, &[&gw.ca, &renewed_ca]).await, now);
    let (code, out) = curl(
        &renewed_ca.write_pem(&gw.dir.0, "renewed-ca.pem"),
        &[&format!("https://{addr}/healthz")],
    );
    assert_eq!((code, out.as_str()), (0, "ok"));
    assert!(health_on(&mut open).await.starts_with("HTTP/1.1 200"));
}

/// The SHA-256 fingerprint line of a certificate, as openssl would print it.
fn pin(issued: &Issued) -> String {
    use rustls::pki_types::pem::PemObject as _;
    let der =
        rustls::pki_types::CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap();
    postern_front::listener::tls::fingerprint(&der).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_authenticate_pinned_actors() {
    let clients = TestCa::new("client CA");
    let robot = clients.client_cert("robot");
    let strict = clients.client_cert("strict");
    let stranger = clients.client_cert("stranger");
    let robot_pin = pin(&robot);
    // The strict actor's pin as openssl prints it: upper case, bytes separated by colons.
    let hex = pin(&strict)["sha256:".len()..].to_uppercase();
    let pairs: Vec<&str> = (0..32).map(|i| &hex[2 * i..2 * i + 2]).collect();
    let strict_pin = format!("SHA256:{}", pairs.join(":"));
    let dir = Dir::new("tls-clients");
    write_private(&dir.0.join("strict.token"), "strict-token-0123456789abcdef");
    let gw = tls_gateway_in(dir, move |t| {
        format!(
            "{t}\n[[actor]]\nname = \"robot\"\nclient_cert_fingerprint = \"{robot_pin}\"\n\n[[actor]]\nname = \"strict\"\ntoken = {{ file = \"strict.token\" }}\nclient_cert_fingerprint = \"{strict_pin}\"\n"
        )
    })
    .await;
    let url = gw.served.url.clone();
    let client = |id: Option<&Issued>| {
        let b = trusting(&gw.ca);
        match id {
            Some(id) => b.identity(identity(id)).build().unwrap(),
            None => b.build().unwrap(),
        }
    };

    // The robot: its certificate alone.
    let mcp = Mcp::connect_with(client(Some(&robot)), &url, "")
        .await
        .unwrap();
    let answer = mcp
        .call(
            "create_invoice",
            json!({"customer": "robot-co", "amount": 1}),
            json!({}),
        )
        .await;
    assert_eq!(execution(&answer)["state"], "completed", "{answer}");
    let id = execution(&answer)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = crate::harness::activity(&gw.dir.0, &["show", &id]);
    assert_eq!(shown["actor"], "robot", "{shown}");

    // No certificate, or one nobody is pinned to, and no token: 401.
    for id in [None, Some(&stranger)] {
        let refused = Mcp::connect_with(client(id), &url, "").await.err().unwrap();
        assert!(refused.to_string().contains("401"), "{refused}");
    }
    // A token actor on a connection with a certificate of another actor: refused, not guessed.
    let mixed = Mcp::connect_with(client(Some(&robot)), &url, BILLING_TOKEN)
        .await
        .err()
        .unwrap();
    assert!(mixed.to_string().contains("different actors"), "{mixed}");
    // A token actor with an unrelated certificate is still itself.
    Mcp::connect_with(client(Some(&stranger)), &url, BILLING_TOKEN)
        .await
        .unwrap();

    // Strict: the token and the certificate, neither alone.
    let token_only = Mcp::connect_with(client(None), &url, "strict-token-0123456789abcdef")
        .await
        .err()
        .unwrap();
    assert!(
        token_only.to_string().contains("client certificate"),
        "{token_only}"
    );
    assert!(Mcp::connect_with(client(Some(&strict)), &url, "")
        .await
        .is_err());
    Mcp::connect_with(client(Some(&strict)), &url, "strict-token-0123456789abcdef")
        .await
        .unwrap();
    assert_eq!(gw.target.state.count_for("robot-co"), 1);
}

#[test]
fn bad_listener_files_are_start_up_errors_naming_the_file() {
    let dir = Dir::new("tls-bad");
    crate::harness::prepare(&dir.0, &tls_config("http://127.0.0.1:9"));
    let ca = TestCa::new("bad files CA");

    let err = crate::harness::serve_refuses(&dir.0);
    assert!(
        err.contains("gw.pem") && err.contains("tls.cert"),
        "missing file: {err}"
    );

    std::fs::write(dir.0.join("gw.pem"), "not a certificate\n").unwrap();
    write_private(&dir.0.join("gw.key"), &server_cert(&ca).key_pem);
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(
        err.contains("gw.pem") && err.contains("no PEM certificate"),
        "empty: {err}"
    );

    // A key of another certificate.
    std::fs::write(dir.0.join("gw.pem"), &server_cert(&ca).cert_pem).unwrap();
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(
        err.contains("gw.key") && err.contains("does not match"),
        "mismatch: {err}"
    );

    // Expired.
    let expired = ca.server_cert(&["127.0.0.1"], Validity::Expired);
    std::fs::remove_file(dir.0.join("gw.key")).unwrap();
    expired.write_pem(&dir.0, "gw.pem", "gw.key");
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(
        err.contains("gw.pem") && err.contains("expired at 2001-01-01"),
        "expired: {err}"
    );

    // A key others can read.
    server_cert(&ca).write_pem(&dir.0, "gw.pem", "gw.key");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.0.join("gw.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(
        err.contains("gw.key") && err.contains("chmod 600"),
        "shared key: {err}"
    );
}

#[test]
fn a_pinned_client_certificate_without_tls_is_refused() {
    let dir = Dir::new("tls-pin-no-tls");
    let text = format!(
        "{}\n[[actor]]\nname = \"robot\"\nclient_cert_fingerprint = \"sha256:{}\"\n",
        config("http://127.0.0.1:9"),
        "ab".repeat(32)
    );
    crate::harness::prepare(&dir.0, &text);
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(
        err.contains("client_cert_fingerprint needs [gateway] tls"),
        "{err}"
    );
}

#[test]
fn plain_http_on_an_address_others_can_reach_is_warned_about_loudly() {
    let dir = Dir::new("tls-warn");
    crate::harness::prepare(&dir.0, &config("http://127.0.0.1:9"));
    let run = |listen: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_postern"))
            .args([
                "serve",
                "-c",
                dir.0.join("postern.toml").to_str().unwrap(),
                "--listen",
                listen,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        crate::harness::listening_url(&mut child);
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let mut err = String::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            err.push_str(&line.unwrap());
            err.push('\n');
        }
        child.wait().unwrap();
        err
    };
    let err = run("0.0.0.0:0");
    assert!(
        err.contains("WARNING") && err.contains("unencrypted"),
        "{err}"
    );
    assert!(err.contains("[gateway] tls"), "{err}");
    let err = run("127.0.0.1:0");
    assert!(!err.contains("WARNING"), "{err}");
}

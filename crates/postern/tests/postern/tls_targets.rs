//! Issue 13 end to end: tools whose targets are `https://`, through a real `postern serve`, in
//! front of the invoice API behind rustls on 127.0.0.1, with certificates from a CA made for
//! the test. A handshake that fails is `failed` (provably nothing sent), never
//! `outcome_unknown`; a connection cut after the request is `outcome_unknown`, recovered by a
//! status query over https; mTLS shows the configured client certificate.

use std::path::Path;

use postern_demo::target::{InvoiceApi, InvoiceApiHandle, Mode};
use postern_testkit::{Issued, TestCa, TlsListener, Validity};
use serde_json::{json, Value};

use crate::harness::{
    activity, execution, execution_id, posts, prepare, write_private, Dir, Mcp, Served,
    BILLING_TOKEN,
};

const API_TOKEN: &str = "invoices-api-token-0123456789";
const LOOPBACK: &[&str] = &["localhost", "127.0.0.1"];

/// The invoice API behind TLS with `cert`'s server config; requests must carry `API_TOKEN`
/// unless `token` is false.
async fn tls_api(config: std::sync::Arc<rustls::ServerConfig>, token: bool) -> InvoiceApiHandle {
    let listener = TlsListener::bind(config).await.unwrap();
    InvoiceApi::serve_on(listener, token.then(|| API_TOKEN.to_string())).unwrap()
}

fn base(api: &InvoiceApiHandle) -> String {
    format!("https://127.0.0.1:{}", api.addr.port())
}

/// A gateway config: the billing actor, the `[credential.*]` tables in `credentials`, then one
/// invoice tool per (name, target base URL, extra `http` fields, credential).
fn config(credentials: &str, tools: &[(&str, String, &str, &str)]) -> String {
    let mut text = format!(
        r#"
[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}
attach_wait = "10s"

[[actor]]
name = "billing"
token = {{ file = "billing.token" }}

[credential.invoices]
kind = "bearer"
secret = {{ file = "invoices.token" }}
{credentials}
"#
    );
    for (name, base, extra, credential) in tools {
        text.push_str(&format!(
            r#"
[[tool]]
name = "{name}"
description = "Create an invoice"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{base}/invoices", credential = "{credential}", response_timeout = "2s"{extra} }}
recovery = {{ status_query = {{ method = "GET", url = "{base}/invoices?idempotency_key={{execution_id}}" }} }}
"#
        ));
    }
    text
}

/// Writes the config, keys, the API token and `ca.pem` (the test CA) into `dir`.
fn prepare_dir(dir: &Path, text: &str, ca: &TestCa) {
    prepare(dir, text);
    write_private(&dir.join("invoices.token"), API_TOKEN);
    ca.write_pem(dir, "ca.pem");
}

async fn call(mcp: &Mcp, tool: &str, customer: &str) -> Value {
    mcp.call(
        tool,
        json!({"customer": customer, "amount": 250}),
        json!({}),
    )
    .await
}

/// A gateway whose `create_invoice` posts to an https invoice API with a certificate from a
/// test CA the tool trusts (`ca_file`).
async fn https_gateway(tag: &str) -> (InvoiceApiHandle, Dir, Served) {
    let ca = TestCa::new("Postern test CA");
    let api = tls_api(
        ca.server_cert(LOOPBACK, Validity::Current).server_config(),
        true,
    )
    .await;
    let dir = Dir::new(tag);
    let text = config(
        "",
        &[(
            "create_invoice",
            base(&api),
            ", ca_file = \"ca.pem\"",
            "invoices",
        )],
    );
    prepare_dir(&dir.0, &text, &ca);
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    (api, dir, served)
}

/// The recorded event names of execution `id`.
fn events(dir: &Path, id: &str) -> Vec<String> {
    activity(dir, &["show", id])["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_target_with_its_ca_configured_completes() {
    let (api, _dir, served) = https_gateway("tls-ok").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    let resp = call(&mcp, "create_invoice", "tls-co").await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    let id = execution_id(&resp);
    let seen = api.state.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].idempotency_key.as_deref(), Some(id.as_str()));
    assert!(seen[0].has_authorization, "the credential was injected");
    assert_eq!(api.state.count_for("tls-co"), 1);
}

/// A target whose certificate is not trusted (CA not configured), names another host, or has
/// expired: the call is `failed` with the reason, nothing reached the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_that_fails_is_failed_and_nothing_is_sent() {
    let ca = TestCa::new("Postern test CA");
    let untrusted = tls_api(
        ca.server_cert(LOOPBACK, Validity::Current).server_config(),
        true,
    )
    .await;
    let other_host = ca.server_cert(&["other.example"], Validity::Current);
    let wrong_host = tls_api(other_host.server_config(), true).await;
    let expired = tls_api(
        ca.server_cert(LOOPBACK, Validity::Expired).server_config(),
        true,
    )
    .await;
    let with_ca = ", ca_file = \"ca.pem\"";
    let tools = [
        ("untrusted", base(&untrusted), "", "invoices"),
        ("wrong_host", base(&wrong_host), with_ca, "invoices"),
        ("expired", base(&expired), with_ca, "invoices"),
    ];
    let dir = Dir::new("tls-refused");
    prepare_dir(&dir.0, &config("", &tools), &ca);
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    let expected = [
        (
            "untrusted",
            "certificate not trusted (unknown CA)",
            &untrusted,
        ),
        (
            "wrong_host",
            "not valid for the host name 127.0.0.1 (wrong host)",
            &wrong_host,
        ),
        ("expired", "certificate expired", &expired),
    ];
    for (tool, reason, api) in expected {
        let resp = call(&mcp, tool, "refused-co").await;
        let ex = execution(&resp);
        assert_eq!(ex["state"], "failed", "{tool}: {resp}");
        assert_eq!(resp["result"]["isError"], true, "{tool}: {resp}");
        let next = ex["next_step"].as_str().unwrap();
        assert!(
            next.contains("TLS handshake with 127.0.0.1 failed"),
            "{next}"
        );
        assert!(next.contains(reason), "{tool}: {next}");
        assert!(api.state.requests().is_empty(), "{tool}: nothing sent");
        let names = events(&dir.0, &execution_id(&resp));
        assert_eq!(
            names.last().map(String::as_str),
            Some("failed"),
            "{names:?}"
        );
        assert!(!names.iter().any(|n| n == "outcome_unknown"), "{names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_after_the_request_is_unknown_and_a_status_query_over_https_recovers_it() {
    let (api, dir, served) = https_gateway("tls-cut").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    api.state.set_mode(Mode::DropAfterCreate);
    let first = call(&mcp, "create_invoice", "cut-co").await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let id = execution_id(&first);
    assert_eq!(api.state.count_for("cut-co"), 1, "the target applied it");

    api.state.set_mode(Mode::Normal);
    let again = call(&mcp, "create_invoice", "cut-co").await;
    let ex = execution(&again);
    assert_eq!(ex["execution_id"], id.as_str(), "{again}");
    assert_eq!(ex["state"], "completed", "{again}");
    assert_eq!(ex["attempt"], "recovered", "{again}");
    assert_eq!(api.state.count_for("cut-co"), 1, "ONE invoice");
    assert_eq!(
        posts(&api.state),
        1,
        "settled by the status query, not a re-send"
    );
    let query = api
        .state
        .requests()
        .into_iter()
        .find(|r| r.method == "GET")
        .unwrap();
    assert_eq!(query.query, Some(format!("idempotency_key={id}")));
    assert!(query.has_authorization);
    let names = events(&dir.0, &id);
    assert!(!names.iter().any(|n| n == "failed"), "{names:?}");
}

/// A client certificate (and key, 0600) for the billing agent, written into `dir`.
fn client_files(dir: &Path, client: &Issued) {
    client.write_pem(dir, "client.pem", "client.key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_shows_the_configured_client_certificate_and_a_call_without_one_fails() {
    let ca = TestCa::new("Postern test CA");
    let clients = TestCa::new("Client CA");
    let server = ca.server_cert(LOOPBACK, Validity::Current);
    let api = tls_api(server.server_config_requiring_client(&clients), false).await;
    let dir = Dir::new("tls-mtls");
    client_files(&dir.0, &clients.client_cert("billing-agent"));
    let credentials = r#"
[credential.invoices_mtls]
kind = "bearer"
secret = { file = "invoices.token" }
client_certificate = "client.pem"
client_key = { file = "client.key" }

[credential.client_only]
kind = "mtls"
client_certificate = "client.pem"
client_key = { file = "client.key" }
"#;
    let with_ca = ", ca_file = \"ca.pem\"";
    let tools = [
        ("bearer_over_mtls", base(&api), with_ca, "invoices_mtls"),
        ("mtls_only", base(&api), with_ca, "client_only"),
        ("no_client_cert", base(&api), with_ca, "invoices"),
    ];
    prepare_dir(&dir.0, &config(credentials, &tools), &ca);
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    let resp = call(&mcp, "bearer_over_mtls", "mtls-co").await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    let resp = call(&mcp, "mtls_only", "mtls-only-co").await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    let seen = api.state.requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].has_authorization, "the bearer token went too");
    assert!(
        !seen[1].has_authorization,
        "an mtls credential adds no header"
    );

    let resp = call(&mcp, "no_client_cert", "no-cert-co").await;
    let ex = execution(&resp);
    assert_eq!(ex["state"], "failed", "{resp}");
    let next = ex["next_step"].as_str().unwrap();
    assert!(next.contains("requires a client certificate"), "{next}");
    assert_eq!(
        api.state.requests().len(),
        2,
        "nothing more reached the target"
    );
    assert_eq!(api.state.count_for("no-cert-co"), 0, "nothing applied");
}

/// `postern serve` with one https tool (`extra` fields in its `http` table, `credential`),
/// after `setup` wrote its files: the stderr of the refused start-up.
fn refused(
    name: &str,
    credentials: &str,
    extra: &str,
    credential: &str,
    setup: impl Fn(&Path),
) -> String {
    let dir = Dir::new(&format!("tls-bad-{name}"));
    let tools = [(
        "create_invoice",
        "https://127.0.0.1:9".to_string(),
        extra,
        credential,
    )];
    prepare_dir(
        &dir.0,
        &config(credentials, &tools),
        &TestCa::new("Postern test CA"),
    );
    setup(&dir.0);
    let stderr = crate::harness::serve_refuses(&dir.0);
    assert!(
        !stderr.contains("PRIVATE KEY"),
        "{name}: key material printed: {stderr}"
    );
    stderr
}

const MTLS_CREDENTIAL: &str = r#"
[credential.client]
kind = "mtls"
client_certificate = "client.pem"
client_key = { file = "client.key" }
"#;

#[test]
fn bad_tls_files_are_start_up_errors_naming_the_file() {
    let stderr = refused(
        "missing-ca",
        "",
        ", ca_file = \"nowhere.pem\"",
        "invoices",
        |_| {},
    );
    assert!(
        stderr.contains("reading http.ca_file") && stderr.contains("nowhere.pem"),
        "{stderr}"
    );

    let stderr = refused(
        "empty-ca",
        "",
        ", ca_file = \"empty.pem\"",
        "invoices",
        |d| std::fs::write(d.join("empty.pem"), "no certificate here\n").unwrap(),
    );
    assert!(
        stderr.contains("http.ca_file") && stderr.contains("empty.pem"),
        "{stderr}"
    );
    assert!(stderr.contains("holds no PEM certificate"), "{stderr}");

    let stderr = refused("key-mismatch", MTLS_CREDENTIAL, "", "client", |d| {
        let ca = TestCa::new("CA");
        let (one, other) = (ca.client_cert("one"), ca.client_cert("other"));
        one.write_pem(d, "client.pem", "unused.key");
        other.write_pem(d, "unused.pem", "client.key");
    });
    assert!(
        stderr.contains("client.pem") && stderr.contains("client.key"),
        "{stderr}"
    );
    assert!(stderr.contains("does not match"), "{stderr}");

    let stderr = refused("key-readable", MTLS_CREDENTIAL, "", "client", |d| {
        use std::os::unix::fs::PermissionsExt;
        let client = TestCa::new("CA").client_cert("one");
        client.write_pem(d, "client.pem", "client.key");
        let open = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(d.join("client.key"), open).unwrap();
    });
    assert!(stderr.contains("client.key"), "{stderr}");
    assert!(
        stderr.contains("readable by others") && stderr.contains("chmod 600"),
        "{stderr}"
    );
}

#[test]
fn a_ca_file_on_a_plain_http_tool_is_refused() {
    let dir = Dir::new("tls-ca-on-http");
    let tools = [(
        "create_invoice",
        "http://127.0.0.1:9".to_string(),
        ", ca_file = \"ca.pem\"",
        "invoices",
    )];
    prepare_dir(&dir.0, &config("", &tools), &TestCa::new("CA"));
    let stderr = crate::harness::serve_refuses(&dir.0);
    assert!(stderr.contains("http.ca_file"), "{stderr}");
    assert!(stderr.contains("not https://"), "{stderr}");
}

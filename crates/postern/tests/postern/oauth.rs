//! Issue 50, the resource server: a hosted agent that holds only an `[[issuer]]`'s access token
//! finds the issuer from the first 401 (RFC 9728), calls with the token, and the record names
//! whom it acted for — never the token. Against the real `postern serve` and a real issuer on
//! loopback (`testkit::issuer`: discovery and key set over HTTP).

use postern_testkit::issuer::TestIssuer;
use serde_json::{json, Value};

use crate::harness::{config, Dir, Mcp, Served, BILLING_TOKEN};
use crate::oidc::OidcProvider;

fn with_issuer(target: &str, issuer: &str) -> String {
    format!(
        "{}\n[[operator]]\nname = \"dana\"\nclaims = {{ issuer = \"{issuer}\", group = \"approvers\" }}\n\n[[issuer]]\nurl = \"{issuer}\"\njwks_refresh = \"1s\"\ntool_scopes = {{ \"*\" = [\"mcp\"], send_wire = [\"payments\"] }}\n\n[[actor]]\nname = \"connector\"\nclaims = {{ issuer = \"{issuer}\", client_id = \"claude\" }}\n",
        config(target)
    )
}

async fn post_initialize(url: &str, token: Option<&str>) -> (u16, String, String) {
    let http = crate::harness::http_client();
    let mut request = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"}}}),
        );
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, challenge, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_agent_finds_the_issuer_and_calls_with_its_access_token() {
    let target = postern_demo::target::InvoiceApi::start().await.unwrap();
    let idp = TestIssuer::start().await;
    let dir = Dir::new("oauth");
    // Spans are exported too: nothing of a token may reach a trace either.
    let traces = crate::telemetry::OtlpReceiver::start().await;
    let text = format!(
        "{}\n[telemetry]\notlp_endpoint = \"http://{}\"\n",
        with_issuer(&format!("http://{}", target.addr), &idp.url),
        traces.addr
    );
    // At trace level, its log kept: nothing of a token may reach it.
    crate::harness::prepare(&dir.0, &crate::limits::with_alice(&text, &dir));
    let log = dir.0.join("stderr.log");
    let (mut child, url) = crate::harness::serve_logging_to(&dir.0, &log);
    // The first 401 points at the protected resource metadata, which names the issuer.
    let (status, challenge, _) = post_initialize(&url, None).await;
    assert_eq!(status, 401);
    let base = url.trim_end_matches("/mcp");
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    let metadata: Value = crate::harness::http_client()
        .get(&metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["resource"], url.as_str(), "{metadata}");
    assert_eq!(metadata["authorization_servers"], json!([idp.url]));

    // The agent calls with the issuer's token for this resource.
    let token =
        idp.token(json!({"sub": "svc-42", "aud": url, "client_id": "claude", "scope": "mcp"}));
    let agent = Mcp::connect(&url, &token).await;
    let args = json!({"customer": "oauth-co", "amount": 7});
    let r = agent.call("create_invoice", args, json!({})).await;
    assert_eq!(
        r["result"]["structuredContent"]["execution"]["state"], "completed",
        "{r}"
    );
    // `activity trace` says whom the agent acted for.
    let traced = crate::harness::activity(&dir.0, &["trace", &crate::harness::execution_id(&r)]);
    assert_eq!(
        traced["acting_for"],
        format!("svc-42 of {} (client claude)", idp.url),
        "{traced}"
    );

    // Refusals, each with its reason and the challenge.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let refused = [
        (
            idp.token(json!({"sub": "s", "aud": url, "client_id": "claude", "exp": t - 120})),
            401,
            "expired",
        ),
        (
            idp.token(json!({"sub": "s", "aud": "http://elsewhere/mcp", "client_id": "claude"})),
            401,
            "not for this resource",
        ),
        (
            idp.unsigned(json!({"sub": "s", "aud": url, "client_id": "claude"})),
            401,
            "signed with none",
        ),
        (
            idp.hs256_with_public_key(json!({"sub": "s", "aud": url, "client_id": "claude"})),
            401,
            "HS256",
        ),
        (
            idp.token(json!({"sub": "s", "aud": url, "client_id": "someone-else"})),
            403,
            "no actor's",
        ),
    ];
    for (bad, code, why) in refused {
        let (status, challenge, body) = post_initialize(&url, Some(&bad)).await;
        assert_eq!(status, code, "{why}: {body}");
        assert!(body.contains(why), "{why}: {body}");
        if code == 401 {
            assert!(challenge.contains("resource_metadata="), "{challenge}");
        }
        assert!(
            !body.contains(&bad[bad.len() - 20..]),
            "the token is not echoed"
        );
    }

    // A tool that needs a scope the token lacks: 403 insufficient_scope, naming what it needs.
    let session = agent
        .run_id()
        .trim_start_matches("mcp-session:")
        .to_string();
    let wire = crate::harness::http_client()
        .post(&url)
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "send_wire", "arguments": {"customer": "x", "amount": 1}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(wire.status().as_u16(), 403);
    let challenge = wire.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"mcp payments\""),
        "{challenge}"
    );
    assert!(challenge.contains("resource_metadata="), "{challenge}");

    // An operator's access token (for `/ops`) decides; an agent's token there does not.
    let ops_url = format!("{base}/ops/runs");
    let dana =
        idp.token(json!({"sub": "dana", "aud": format!("{base}/ops"), "groups": ["approvers"]}));
    let http = crate::harness::http_client();
    let ops = |token: String| http.get(&ops_url).bearer_auth(token).send();
    assert_eq!(ops(dana).await.unwrap().status().as_u16(), 200);
    let agent_on_ops = idp.token(json!({"sub": "svc-42", "aud": format!("{base}/ops"), "client_id": "claude", "groups": ["approvers"]}));
    let refused = ops(agent_on_ops).await.unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    let why: Value = refused.json().await.unwrap();
    assert!(
        why["error"]
            .as_str()
            .unwrap()
            .contains("is actor \"connector\""),
        "{why}"
    );
    let for_mcp = idp.token(json!({"sub": "dana", "aud": url, "groups": ["approvers"]}));
    assert_eq!(
        ops(for_mcp).await.unwrap().status().as_u16(),
        401,
        "a token for /mcp is not for /ops"
    );

    // One actor's token on another actor's session: the session does not exist for it.
    let billing = Mcp::connect(&url, BILLING_TOKEN).await;
    let hijack = crate::harness::http_client()
        .post(&url)
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .header(
            "mcp-session-id",
            billing.run_id().trim_start_matches("mcp-session:"),
        )
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(hijack.status().as_u16(), 404);

    // The record names whom the agent acted for; nothing of the token is stored or exported.
    let (export, accepted) = crate::harness::exported_acceptance(&dir.0, "create_invoice");
    assert!(accepted.contains("\"subject\":\"svc-42\""), "{accepted}");
    assert!(
        !export.contains("send_wire"),
        "the refused call was not recorded"
    );
    // The Sessions log names whom the agent acted for.
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .current_dir(&dir.0)
        .env("POSTERN_OPERATOR_TOKEN", crate::harness::ALICE_TOKEN)
        .args(["sessions", "show", &agent.run_id(), "--gateway", &url])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(&format!(
            "acting for   svc-42 of {} (client claude)",
            idp.url
        )),
        "{shown}"
    );
    assert!(accepted.contains("\"client_id\":\"claude\""), "{accepted}");
    assert!(
        accepted.contains(&format!("\"issuer\":\"{}\"", idp.url)),
        "{accepted}"
    );
    let signature = token.rsplit('.').next().unwrap();
    let payload = token.split('.').nth(1).unwrap();
    let mut places = vec![("audit export".to_string(), export.into_bytes())];
    for entry in std::fs::read_dir(&dir.0).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.to_string_lossy().contains("ledger.db") {
            places.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    for (place, bytes) in places {
        let text = String::from_utf8_lossy(&bytes);
        for part in [signature, payload] {
            assert!(
                !text.contains(&part[..16]),
                "{place} holds part of the token"
            );
        }
    }
    // The target got the gateway's own request: no Authorization from the agent, nothing of
    // the token anywhere in what it received.
    for seen in target.state.requests() {
        assert!(!seen.has_authorization, "{seen:?}");
        assert!(!seen.body.contains(&token[..40]), "{seen:?}");
    }
    let metrics = crate::harness::metrics(base).await;
    // A graceful stop flushes the span exporter.
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let _ = child.wait();
    crate::harness::eventually("the calls' spans exported", || {
        traces.spans().iter().any(|s| s.name == "tools/call")
    })
    .await;
    let exported = String::from_utf8_lossy(&traces.raw()).into_owned();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("\"level\":\"DEBUG\""), "a debug-level log");
    for (place, text) in [
        ("the log", &logged),
        ("/metrics", &metrics),
        ("the exported traces", &exported),
    ] {
        for part in [signature, payload] {
            assert!(
                !text.contains(&part[..16]),
                "{place} holds part of the token"
            );
        }
    }
}

/// Issue 50's interoperability: the Python SDK's OAuth client (client credentials) goes from
/// the first 401 through the protected resource metadata and a certified provider's metadata to
/// a token for this resource, and the call completes; the record names the client. The gateway
/// starts before the provider (its keys are fetched when the first token arrives).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_gets_a_token_from_a_certified_provider_and_calls() {
    crate::interop::require_sdk().await;
    let target = postern_demo::target::InvoiceApi::start().await.unwrap();
    let dir = Dir::new("oauth-python");
    // The provider's port is chosen first: the gateway names it before it runs.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let issuer = format!("http://127.0.0.1:{port}");
    let served = Served::start(
        &dir.0,
        &with_issuer(&format!("http://{}", target.addr), &issuer),
    );
    let secret = "a-client-secret-for-the-oauth-test-0123456789";
    let provider = OidcProvider::start_on(port, &served.url, "claude", secret, json!({}));
    assert_eq!(provider.issuer, issuer);
    let script = crate::foreign::repo_root().join("tests/interop/python_oauth.py");
    let out = crate::foreign::output({
        let mut c = crate::interop::python3(&[script.to_str().unwrap()]);
        c.args([&served.url, "claude", secret, &issuer]);
        c
    })
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python_oauth.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["state"], "completed", "{result}");
    assert_eq!(result["token_type"], "Bearer", "{result}");
    let (_, accepted) = crate::harness::exported_acceptance(&dir.0, "create_invoice");
    assert!(accepted.contains("\"client_id\":\"claude\""), "{accepted}");
    assert!(
        accepted.contains(&format!("\"issuer\":\"{issuer}\"")),
        "{accepted}"
    );
    served.stop();
}

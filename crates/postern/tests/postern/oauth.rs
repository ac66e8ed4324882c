//! Issue 50, the resource server: a hosted agent that holds only an `[[issuer]]`'s access token
//! finds the issuer from the first 401 (RFC 9728), calls with the token, and the record names
//! whom it acted for — never the token. Against the real `postern serve` and a real issuer on
//! loopback (`testkit::issuer`: discovery and key set over HTTP).

use postern_testkit::issuer::TestIssuer;
use serde_json::{json, Value};

use crate::harness::{config, Dir, Mcp, Served, BILLING_TOKEN};

fn with_issuer(target: &str, issuer: &str) -> String {
    format!(
        "{}\n[[issuer]]\nurl = \"{issuer}\"\njwks_refresh = \"1s\"\n\n[[actor]]\nname = \"connector\"\nclaims = {{ issuer = \"{issuer}\", client_id = \"claude\" }}\n",
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
    let served = Served::start(
        &dir.0,
        &with_issuer(&format!("http://{}", target.addr), &idp.url),
    );
    // The first 401 points at the protected resource metadata, which names the issuer.
    let (status, challenge, _) = post_initialize(&served.url, None).await;
    assert_eq!(status, 401);
    let base = served.url.trim_end_matches("/mcp");
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
    assert_eq!(metadata["resource"], served.url.as_str(), "{metadata}");
    assert_eq!(metadata["authorization_servers"], json!([idp.url]));

    // The agent calls with the issuer's token for this resource.
    let token = idp.token(json!({"sub": "svc-42", "aud": served.url, "client_id": "claude"}));
    let agent = Mcp::connect(&served.url, &token).await;
    let args = json!({"customer": "oauth-co", "amount": 7});
    let r = agent.call("create_invoice", args, json!({})).await;
    assert_eq!(
        r["result"]["structuredContent"]["execution"]["state"], "completed",
        "{r}"
    );

    // Refusals, each with its reason and the challenge.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let refused = [
        (
            idp.token(
                json!({"sub": "s", "aud": served.url, "client_id": "claude", "exp": t - 120}),
            ),
            401,
            "expired",
        ),
        (
            idp.token(json!({"sub": "s", "aud": "http://elsewhere/mcp", "client_id": "claude"})),
            401,
            "not for this resource",
        ),
        (
            idp.unsigned(json!({"sub": "s", "aud": served.url, "client_id": "claude"})),
            401,
            "signed with none",
        ),
        (
            idp.hs256_with_public_key(
                json!({"sub": "s", "aud": served.url, "client_id": "claude"}),
            ),
            401,
            "HS256",
        ),
        (
            idp.token(json!({"sub": "s", "aud": served.url, "client_id": "someone-else"})),
            403,
            "no actor's",
        ),
    ];
    for (bad, code, why) in refused {
        let (status, challenge, body) = post_initialize(&served.url, Some(&bad)).await;
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

    // One actor's token on another actor's session: the session does not exist for it.
    let billing = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let hijack = crate::harness::http_client()
        .post(&served.url)
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
    served.stop();
}

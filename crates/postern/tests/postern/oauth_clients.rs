//! Issue 50's foreign OAuth clients against `postern serve` and a certified provider
//! (`oidc-provider`, [`crate::oidc`]): the Python SDK's `OAuthClientProvider` and the TypeScript
//! SDK's auth provider each go from the first 401 through the protected resource metadata, the
//! provider's metadata, dynamic client registration and the authorization code with PKCE to a
//! completed call; the TypeScript SDK's client-credentials provider too. Then the same flows
//! with opaque tokens, checked by RFC 7662 introspection, and the refusals introspection adds.

use serde_json::{json, Value};

use crate::harness::{assert_acted_for, config, Dir, Served, ALICE_TOKEN};
use crate::oidc::{free_port, OidcProvider};

const SECRET: &str = "a-client-secret-for-the-oauth-test-0123456789";
const INTROSPECTION_SECRET: &str = "postern-introspection-secret-0123456789";

/// The test config with the provider at `issuer` (introspecting opaque tokens when `opaque`):
/// actor `connector` is client `claude`, actor `person` anyone in group `agents`.
fn with_provider(target: &str, issuer: &str, opaque: bool) -> String {
    let introspection = match opaque {
        true => "introspection = { client_id = \"postern-rs\", client_secret = { file = \"introspection.secret\" } }\n",
        false => "",
    };
    format!(
        "{}\n[[issuer]]\nurl = \"{issuer}\"\n{introspection}\n[[actor]]\nname = \"connector\"\nclaims = {{ issuer = \"{issuer}\", client_id = \"claude\" }}\n\n[[actor]]\nname = \"person\"\nclaims = {{ issuer = \"{issuer}\", group = \"agents\" }}\n",
        config(target)
    )
}

struct Bench {
    _target: postern_demo::target::InvoiceApiHandle,
    dir: Dir,
    served: Served,
    provider: OidcProvider,
}

/// The invoice API, a gateway naming a provider on a port chosen first, then the provider
/// (signed in as alice of group `agents`; registration open).
async fn start(tag: &str, opaque: bool) -> Bench {
    let target = postern_demo::target::InvoiceApi::start().await.unwrap();
    let dir = Dir::new(tag);
    crate::harness::write_private(&dir.0.join("introspection.secret"), INTROSPECTION_SECRET);
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let text = with_provider(&format!("http://{}", target.addr), &issuer, opaque);
    let served = Served::start(&dir.0, &crate::limits::with_alice(&text, &dir));
    let provider = OidcProvider::start_on(
        port,
        &served.url,
        "claude",
        SECRET,
        json!({
            "opaque": opaque,
            "registration": true,
            "account": {"sub": "alice", "groups": ["agents"]},
            "clients": [{
                "client_id": "postern-rs", "client_secret": INTROSPECTION_SECRET,
                "grant_types": [], "response_types": [], "redirect_uris": [],
            }],
        }),
    );
    Bench {
        _target: target,
        dir,
        served,
        provider,
    }
}

/// Runs a foreign client; its last stdout line, as JSON.
async fn run(command: std::process::Command, what: &str) -> Value {
    let out = crate::foreign::output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
}

fn python(script: &str, args: &[&str]) -> std::process::Command {
    let path = crate::foreign::repo_root()
        .join("tests/interop")
        .join(script);
    let mut c = crate::interop::python3(&[path.to_str().unwrap()]);
    c.args(args);
    c
}

fn typescript(args: &[&str]) -> std::process::Command {
    let node = crate::foreign::NodeClients::require();
    let script = crate::foreign::repo_root().join("tests/interop/ts_oauth.mjs");
    let mut c = node.node(&script);
    c.arg(node.package("@modelcontextprotocol/sdk"));
    c.args(args);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_registers_and_signs_a_person_in_with_code_and_pkce() {
    crate::interop::require_sdk().await;
    let b = start("oauth-python-code", false).await;
    let result = run(
        python("python_oauth_code.py", &[&b.served.url]),
        "python_oauth_code.py",
    )
    .await;
    assert_eq!(result["state"], "completed", "{result}");
    assert_eq!(result["refresh_token"], true, "{result}");
    assert_acted_for(&b.dir.0, "create_invoice", "person", "alice");
    b.served.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_signs_in_with_code_and_pkce_and_with_client_credentials() {
    let b = start("oauth-ts", false).await;
    let code = run(typescript(&[&b.served.url, "code"]), "ts_oauth.mjs code").await;
    assert_eq!(code["state"], "completed", "{code}");
    assert_acted_for(&b.dir.0, "create_invoice", "person", "alice");
    let issuer = b.provider.issuer.clone();
    let credentials = run(
        typescript(&[
            &b.served.url,
            "client_credentials",
            "claude",
            SECRET,
            &issuer,
        ]),
        "ts_oauth.mjs client_credentials",
    )
    .await;
    assert_eq!(credentials["state"], "completed", "{credentials}");
    assert_acted_for(&b.dir.0, "create_invoice", "connector", "claude");
    b.served.stop();
}

/// Opaque tokens: the gateway asks the provider (RFC 7662) as its own client, and the answer
/// decides as a JWT's claims would. A made-up token, and an operator's static token on `/mcp`
/// (which is never sent to the provider: only a token that is no static one is asked about),
/// are refused 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_and_refused_when_inactive() {
    crate::interop::require_sdk().await;
    let b = start("oauth-opaque", true).await;
    let code = run(typescript(&[&b.served.url, "code"]), "ts_oauth.mjs code").await;
    assert_eq!(code["state"], "completed", "{code}");
    assert_acted_for(&b.dir.0, "create_invoice", "person", "alice");
    let issuer = b.provider.issuer.clone();
    let credentials = run(
        python(
            "python_oauth.py",
            &[&b.served.url, "claude", SECRET, &issuer],
        ),
        "python_oauth.py",
    )
    .await;
    assert_eq!(credentials["state"], "completed", "{credentials}");
    // A client-credentials token names no subject when introspected: the client is its subject.
    assert_acted_for(&b.dir.0, "create_invoice", "connector", "claude");
    let http = crate::harness::http_client();
    for token in ["made-up-opaque-token-0123456789abcdef", ALICE_TOKEN] {
        let response = http
            .post(&b.served.url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
        assert!(response
            .headers()
            .get("www-authenticate")
            .is_some_and(|v| v.to_str().unwrap().contains("resource_metadata=")));
    }
    b.served.stop();
}

//! Issue 32, the upstream's environment: a third-party stdio server (the reference
//! `server-everything` from the npm registry, pinned) started by `postern serve` whose own
//! environment holds an operator's token, an actor's token and a credential's secret. Its
//! `get-env` tool, called by an agent through Postern, shows none of them — only the safe base
//! and the variables its `env` table gives it, one of them a secret given deliberately — and
//! `postern upstream list` names what it receives, never a value.

use serde_json::json;

use crate::foreign::NodeClients;
use crate::harness::{operator, Dir, Mcp, Served, ALICE_TOKEN, BILLING_TOKEN};
use crate::upstream::wait_available;

/// Gateway secrets passed by environment, as an operator would.
pub(crate) const GATEWAY_SECRETS: [(&str, &str); 4] = [
    ("ALICE_OPERATOR_TOKEN", ALICE_TOKEN),
    ("BILLING_AGENT_TOKEN", BILLING_TOKEN),
    ("BANK_TOKEN", "bank-credential-secret-7c1d9e"),
    ("AWS_SECRET_ACCESS_KEY", "aws-secret-in-the-gateway-env-42"),
];
/// The one secret the upstream is meant to have.
const UPSTREAM_KEY: (&str, &str) = ("EVERYTHING_API_KEY", "the-upstreams-own-key-5b8f");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_receives_only_the_safe_base_and_its_own_env() {
    let node = NodeClients::require();
    let server = node
        .package("@modelcontextprotocol/server-everything")
        .join("dist/index.js");
    let dir = Dir::new("up-env");
    let config = format!(
        r#"{gateway}
[upstream.ev]
command = [{node:?}, {server:?}, "stdio"]
env = {{ EVERYTHING_MODE = "through-postern", {key} = {{ env = "{key}" }} }}
expose = "all"
default_class = "read_only"
"#,
        gateway = env_gateway("ev_*"),
        node = node.node_binary().to_str().unwrap(),
        server = server.to_str().unwrap(),
        key = UPSTREAM_KEY.0,
    );
    crate::harness::prepare(&dir.0, &config);
    let mut env: Vec<(&str, &str)> = GATEWAY_SECRETS.to_vec();
    env.push(UPSTREAM_KEY);
    let served = Served::spawn_with_env(&dir.0, "127.0.0.1:0", &env);
    wait_available(&served.url, "ev_get-env").await;

    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let response = mcp.call("ev_get-env", json!({}), json!({})).await;
    // What the upstream printed, wherever the gateway puts it in the result.
    let seen = response["result"].to_string();
    assert!(
        seen.contains("through-postern") && seen.contains(UPSTREAM_KEY.1),
        "the upstream's env table reached it: {seen}"
    );
    assert!(seen.contains("PATH"), "the safe base reached it: {seen}");
    for (name, value) in GATEWAY_SECRETS {
        assert!(
            !seen.contains(name) && !seen.contains(value),
            "{name} of the gateway's environment reached the upstream: {seen}"
        );
    }

    let (code, out, err) = operator(&served, &["upstream", "list"]);
    assert_eq!(code, 0, "upstream list failed: {err}");
    let line = out
        .lines()
        .find(|l| l.contains("environment (names only):"))
        .unwrap_or_else(|| panic!("no environment line in:\n{out}"));
    for name in ["PATH", "EVERYTHING_MODE", UPSTREAM_KEY.0] {
        assert!(line.contains(name), "{name} is not named: {line}");
    }
    assert!(!out.contains(UPSTREAM_KEY.1), "a value was printed:\n{out}");
    for (name, _) in GATEWAY_SECRETS {
        assert!(!line.contains(name), "{name} is named: {line}");
    }
    served.stop();
}

/// A gateway whose actor's and operator's tokens and credential's secret are read from the
/// environment ([`GATEWAY_SECRETS`]), its actor `billing` allowed `tools`.
pub(crate) fn env_gateway(tools: &str) -> String {
    format!(
        r#"[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}

[[actor]]
name = "billing"
token = {{ env = "BILLING_AGENT_TOKEN" }}
tools = [{tools:?}]

[[operator]]
name = "alice"
token = {{ env = "ALICE_OPERATOR_TOKEN" }}

[credential.bank]
kind = "bearer"
secret = {{ env = "BANK_TOKEN" }}
"#
    )
}

//! A foreign client: the MCP Inspector's CLI (npm `@modelcontextprotocol/inspector`, pinned in
//! `tests/interop/package.json`) lists the tools and calls one against a real `postern serve`,
//! sending the bearer token itself (`--header`), in both of its protocol eras. Each CLI run is
//! its own connection: the second identical call is recovered from the ledger, not repeated.
//!
//! The Inspector reaches the gateway through a loopback proxy that adds nothing (the token is
//! the Inspector's own) and records each request's `Mcp-*` headers, so the test can check which
//! protocol was actually spoken.

use postern_demo::target::InvoiceApi;
use serde_json::Value;

use crate::foreign::{output, NodeClients, Proxy};
use crate::harness::{config, Dir, Served, BILLING_TOKEN};

const ARGS: &str = r#"{"customer":"inspector","amount":5}"#;

async fn run_inspector(era: &str) {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new(&format!("inspector-{era}"));
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let proxy = Proxy::start(&served.url, None).await;
    inspect_and_call(era, &dir, &proxy.url, None, &target).await;
    check_protocol(era, &proxy.seen());
}

/// Lists the tools and calls `create_invoice` twice (two Inspector processes, two
/// connections): one execution, one invoice. `ca_file`: the CA Node.js is told to trust
/// (`NODE_EXTRA_CA_CERTS`, as a user would tell any Node program).
async fn inspect_and_call(
    era: &str,
    dir: &Dir,
    url: &str,
    ca_file: Option<&std::path::Path>,
    target: &postern_demo::target::InvoiceApiHandle,
) {
    let clients = NodeClients::require();
    // The Inspector keeps a catalog and settings under $HOME: a throw-away one.
    let home = dir.0.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let launcher = clients
        .package("@modelcontextprotocol/inspector")
        .join("clients/launcher/build/index.js");
    let bearer = format!("Authorization: Bearer {BILLING_TOKEN}");

    let inspect = |args: &[&str]| {
        let mut c = clients.node(&launcher);
        c.args(["--cli", url, "--protocol-era", era, "--header", &bearer])
            .args(["--format", "json", "--connect-timeout", "30000"])
            .args(args)
            .env("HOME", &home)
            .env_remove("MCP_CATALOG_PATH")
            .env_remove("MCP_CLIENT_CONFIG_PATH")
            .env_remove("NODE_EXTRA_CA_CERTS");
        if let Some(ca) = ca_file {
            c.env("NODE_EXTRA_CA_CERTS", ca);
        }
        c
    };
    let run = |args: &'static [&'static str]| {
        let command = inspect(args);
        async move {
            let out = output(command).await;
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "inspector --cli ({era}) {args:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
                out.status
            );
            let v: Value = serde_json::from_str(stdout.trim())
                .unwrap_or_else(|e| panic!("inspector output is not JSON ({e}): {stdout}"));
            v["result"].clone()
        }
    };

    let listed = run(&["--method", "tools/list"]).await;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in ["create_invoice", "execution_status"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }

    const CALL: &[&str] = &[
        "--method",
        "tools/call",
        "--tool-name",
        "create_invoice",
        "--tool-args-json",
        ARGS,
    ];
    let first = run(CALL).await;
    let ex = &first["structuredContent"]["execution"];
    assert_eq!(first["isError"], Value::Bool(false), "{first}");
    assert_eq!(ex["state"], "completed", "{first}");
    assert_eq!(ex["attempt"], "new", "{first}");
    let id = ex["execution_id"].as_str().unwrap().to_string();
    assert!(
        first["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&id)),
        "{first}"
    );

    // A second process, a second connection, the same intent: the same execution.
    let again = run(CALL).await;
    let ex2 = &again["structuredContent"]["execution"];
    assert_eq!(ex2["execution_id"], id.as_str(), "{again}");
    assert_eq!(ex2["attempt"], "recovered", "{again}");
    assert_eq!(target.state.count_for("inspector"), 1);
}

/// The protocol actually spoken, as the proxy saw it.
fn check_protocol(era: &str, seen: &[crate::foreign::Seen]) {
    let posts: Vec<_> = seen.iter().filter(|s| s.method == "POST").collect();
    assert!(!posts.is_empty(), "{seen:?}");
    match era {
        "legacy" => {
            assert!(
                posts.iter().all(|s| s.header("mcp-method").is_none()),
                "{seen:?}"
            );
            assert!(
                posts
                    .iter()
                    .filter_map(|s| s.header("mcp-protocol-version"))
                    .all(|v| v == "2025-11-25"),
                "{seen:?}"
            );
            assert!(
                posts.iter().any(|s| s.header("mcp-session-id").is_some()),
                "no session in {seen:?}"
            );
        }
        "modern" => {
            assert_eq!(
                posts[0].header("mcp-method"),
                Some("server/discover"),
                "{seen:?}"
            );
            assert!(
                posts
                    .iter()
                    .all(|s| s.header("mcp-protocol-version") == Some("2026-07-28")),
                "{seen:?}"
            );
            assert!(
                seen.iter().all(|s| s.header("mcp-session-id").is_none()),
                "a session in {seen:?}"
            );
            assert!(
                posts
                    .iter()
                    .any(|s| s.header("mcp-method") == Some("tools/call")
                        && s.header("mcp-name") == Some("create_invoice")),
                "{seen:?}"
            );
        }
        other => panic!("unknown era {other}"),
    }
}

/// Over TLS (issue 13): the Inspector verifies the gateway's certificate against the test CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_and_calls_over_tls() {
    for era in ["legacy", "modern"] {
        let gw = crate::tls_listener::tls_gateway(&format!("inspector-tls-{era}"), |t| t).await;
        inspect_and_call(era, &gw.dir, &gw.served.url, Some(&gw.ca_file), &gw.target).await;
    }
}

/// `--protocol-era legacy`: the `initialize` handshake, protocol 2025-11-25, a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_and_calls() {
    run_inspector("legacy").await;
}

/// `--protocol-era modern`: `server/discover`, then stateless requests at 2026-07-28.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_and_calls_at_2026_07_28() {
    run_inspector("modern").await;
}

//! Bounds on what a caller can put into the record (issue 12): operation keys, re-issue keys,
//! intent scopes and run ids are 1 to 256 bytes; and each actor has its own token.

use postern_gateway::demo_target::InvoiceApi;
use serde_json::json;

use crate::harness::{config, Dir, Mcp, Served, BILLING_TOKEN, OPS_TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_scopes_and_run_ids_are_bounded() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("limits");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let long = "k".repeat(257);
    for (meta, named) in [
        ("io.postern/idempotency-key", "operation key"),
        ("io.postern/reissue-key", "re-issue key"),
        ("io.postern/intent-scope", "intent scope"),
        ("io.postern/run", "run id"),
    ] {
        let r = mcp
            .call(
                "create_invoice",
                json!({"customer": "limits-co", "amount": 1}),
                json!({"_meta": {meta: long}}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32602, "{meta}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{message}");
        assert!(message.contains("256 bytes"), "{message}");
        assert!(!message.contains(&long), "the value is not echoed");
    }
    assert!(target.state.requests().is_empty());
    // 256 bytes is fine.
    let ok = mcp
        .call(
            "create_invoice",
            json!({"customer": "limits-co", "amount": 1}),
            json!({"_meta": {"io.postern/idempotency-key": "k".repeat(256)}}),
        )
        .await;
    assert!(ok["result"].is_object(), "{ok}");
}

#[test]
fn two_actors_with_one_token_are_refused_at_start_up() {
    let dir = Dir::new("same-token");
    crate::harness::prepare(&dir.0, &config("http://127.0.0.1:9"));
    std::fs::write(dir.0.join("ops.token"), BILLING_TOKEN).unwrap();
    assert_ne!(BILLING_TOKEN, OPS_TOKEN);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["serve", "-c", dir.0.join("postern.toml").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("actors billing and ops have the same token"),
        "{stderr}"
    );
    assert!(!stderr.contains(BILLING_TOKEN), "{stderr}");
}

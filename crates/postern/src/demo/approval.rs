//! The demo's human scene: a payment tool with `approval = "every_call"`. The agent's call waits
//! (`awaiting_approval`, nothing sent), its retry is the same request, an operator approves it
//! through the gateway (as `postern approvals approve` does over `/ops`), and it is sent once.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use postern_pipeline::Gateway;
use serde_json::json;

use super::{heading, line, Demo};

/// The operator of the demo (its token file is written beside the config).
pub(super) const OPERATOR_TOKEN_FILE: &str = "operator.token";

/// The operator and the tool of the scene, for the demo's config.
pub(super) fn config(target: &str) -> String {
    format!(
        r#"
[[operator]]
name = "demo-operator"
token = {{ file = "{OPERATOR_TOKEN_FILE}" }}

[[tool]]
name = "pay_supplier"
description = "Pay a supplier (every call approved by an operator)"
class = "idempotent_write"
match_window = "10m"
approval = "every_call"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}
"#
    )
}

/// The scene, numbered `n`.
pub(super) async fn scene(n: u32, d: &Demo, gateway: &Arc<Gateway>) -> Result<()> {
    heading(
        n,
        "A payment that needs a person: the call waits, an operator approves it, it is sent once.",
    );
    let args = json!({"customer": "wayne", "amount": 12000});
    let waiting = d.call("pay_supplier", args.clone(), json!({}), "").await?;
    let ex = &waiting["result"]["structuredContent"]["execution"];
    let id = ex["execution_id"].as_str().unwrap_or_default().to_string();
    d.call(
        "pay_supplier",
        args.clone(),
        json!({}),
        "   ← the agent retries while it waits",
    )
    .await?;
    line("why      the same intent is the same execution and the same approval request: never a second prompt");
    let pending = gateway.operator().pending_decision(id.parse()?).await?;
    line(format!(
        "operator → approves {id} (what `postern approvals approve` asks /ops to do), bound to fingerprint {}…",
        pending.fingerprint.chars().take(24).collect::<String>()
    ));
    let before = d.target.requests().len();
    gateway
        .operator()
        .approve(
            &id,
            "demo-operator",
            &pending.fingerprint,
            Some("invoice 4711 checked".into()),
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    d.show_target_traffic(before);
    d.invoices_for("wayne");
    d.call("pay_supplier", args, json!({}), "   ← the agent asks again")
        .await?;
    line("why      the approval named the execution and its fingerprint, was recorded with who and why, and sent it once");
    Ok(())
}

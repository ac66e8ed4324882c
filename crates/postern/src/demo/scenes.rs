//! The demo's first eight scenes (one function each): the invoice API called through the
//! gateway by a flaky agent; and its last, the audit chain verified offline.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use postern_demo::target::Mode;
use serde_json::json;

use super::{heading, line, Demo, Stage};
use postern_demo::client::McpClient;

/// What runs where, before the first scene.
pub(super) fn introduce(stage: &Stage) {
    println!(
        "Postern demo: an MCP action gateway where a lost answer never becomes a second action."
    );
    println!();
    line(format!(
        "invoice API (the target)   {}   counts invoices per customer",
        stage.target_url
    ));
    line(format!(
        "gateway (MCP, Streamable HTTP)   {}",
        stage.mcp_url
    ));
    line(format!(
        "ledger (SQLite, durable, hash-chained)   {}",
        stage.dir.join("ledger.db").display()
    ));
    line("tools: create_invoice (idempotent_write, 10 min match window, status query)");
    line("       send_wire (irreversible), list_invoices (read_only),");
    line("       create_invoice_tls and create_invoice_public_roots (the same API over https),");
    line("       pay_supplier (every call approved by an operator),");
    line("       book_invoice (a tool of an upstream MCP server over stdio, irreversible)");
}

/// Scene 1: a new invoice; its execution id.
pub(super) async fn new_invoice(d: &Demo) -> Result<String> {
    heading(1, "The agent creates an invoice.");
    let first = d
        .call(
            "create_invoice",
            json!({"customer": "acme", "amount": 1250}),
            json!({}),
            "",
        )
        .await?;
    let first_id = first["result"]["structuredContent"]["execution"]["execution_id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    line("why      a new intent: the gateway recorded `dispatched` (with the Idempotency-Key it sends) before the first byte left");
    d.invoices_for("acme");
    Ok(first_id)
}

/// Scene 2: the answer is lost and the agent retries on a new connection; its execution id.
pub(super) async fn lost_answer(d: &Demo, stage: &Stage) -> Result<String> {
    heading(
        2,
        "The answer is lost on the way back; the agent retries on a new connection.",
    );
    d.target
        .set_mode(Mode::SlowOnce(Duration::from_millis(600)));
    let (id, body) = d.client.request(
        "create_invoice",
        json!({"customer": "globex", "amount": 990}),
        json!({}),
    );
    line(format!("agent  → tools/call create_invoice {{\"customer\":\"globex\",\"amount\":990}} (JSON-RPC id {id})"));
    let cut = d.client.raw(&body, Some(Duration::from_millis(200))).await;
    line(format!(
        "agent  ✗ {} (the target was still working)",
        if cut.is_err() {
            "connection dropped after 200 ms"
        } else {
            "unexpectedly answered"
        }
    ));
    tokio::time::sleep(Duration::from_millis(800)).await;
    d.invoices_for("globex");
    let retry_client =
        McpClient::connect(&stage.mcp_url, &stage.token, "postern-demo-agent").await?;
    let retry = Demo {
        client: retry_client,
        ledger: stage.ledger.clone(),
        target: stage.api.state.clone(),
    };
    let recovered = retry
        .call(
            "create_invoice",
            json!({"amount": 990, "customer": "globex"}),
            json!({}),
            "   ← same intent, new connection and session",
        )
        .await?;
    let lost_id = recovered["result"]["structuredContent"]["execution"]["execution_id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    line("why      same actor, same fingerprint (key order and JSON-RPC id do not matter), inside the 10 min window:");
    line("         answered from the record. `delivery_failed` is the lost answer; the action itself happened once.");
    d.invoices_for("globex");
    Ok(lost_id)
}

/// Scene 3: the stream is cut and resumed.
pub(super) async fn cut_stream(d: &Demo) -> Result<()> {
    heading(
        3,
        "The stream carrying the answer is cut; the agent resumes the stream instead of asking again.",
    );
    d.target
        .set_mode(Mode::SlowOnce(Duration::from_millis(600)));
    let (id, body) = d.client.request(
        "create_invoice",
        json!({"customer": "hooli", "amount": 420}),
        json!({}),
    );
    line(format!("agent  → tools/call create_invoice {{\"customer\":\"hooli\",\"amount\":420}} (JSON-RPC id {id})"));
    let before = d.target.requests().len();
    let last_seen = d.client.post_and_cut(&body).await?;
    line(format!(
        "agent  ✗ stream cut after its first event (id {last_seen}); the target is still working"
    ));
    tokio::time::sleep(Duration::from_millis(800)).await;
    d.show_target_traffic(before);
    line(format!(
        "agent  → GET /mcp  Last-Event-ID: {last_seen}   ← same session, no new request"
    ));
    let (replayed, ids) = d.client.resume(&last_seen).await?;
    line(format!("agent  ← replayed event(s) {}", ids.join(", ")));
    d.show_answer(&replayed).await?;
    line("why      the answer was made while the agent was away; the cut stream was kept (in the ledger, so a");
    line("         restart would not lose it) and replayed to its own session. A replay is not a retry: nothing was sent again.");
    d.invoices_for("hooli");
    Ok(())
}

/// Scenes 4 and 5: a new key is a new invoice; the same key with other arguments a conflict.
pub(super) async fn keyed(d: &Demo) -> Result<()> {
    heading(
        4,
        "The agent really wants a second, separate invoice: it says so with a new idempotencyKey.",
    );
    d.call(
        "create_invoice",
        json!({"customer": "acme", "amount": 1250}),
        json!({"idempotencyKey": "acme-march-2"}),
        "",
    )
    .await?;
    d.invoices_for("acme");

    heading(5, "The same key with a different amount is a conflict: nothing changes, the original is named.");
    d.call(
        "create_invoice",
        json!({"customer": "acme", "amount": 9999}),
        json!({"idempotencyKey": "acme-march-2"}),
        "",
    )
    .await?;
    d.invoices_for("acme");
    Ok(())
}

/// Scene 6: applied and never answered, then settled by the status query.
pub(super) async fn unanswered(d: &Demo) -> Result<()> {
    heading(6, "The target applies the request and never answers (the gateway's 1 s response timeout fires).");
    d.target.set_mode(Mode::HangOnce);
    d.call(
        "create_invoice",
        json!({"customer": "initech", "amount": 300}),
        json!({}),
        "",
    )
    .await?;
    line("why      sent but unanswered is `outcome_unknown`, never `failed`: a 'failure' would invite a duplicate");
    d.call(
        "create_invoice",
        json!({"customer": "initech", "amount": 300}),
        json!({}),
        "   ← the agent retries",
    )
    .await?;
    line("why      idempotent_write with a status query: the gateway asked the target about this execution's key instead of re-sending");
    d.invoices_for("initech");
    Ok(())
}

/// Scene 7: an irreversible tool's unknown outcome goes to a person.
pub(super) async fn irreversible(d: &Demo) -> Result<()> {
    heading(
        7,
        "An irreversible tool with an unknown outcome stops for a human.",
    );
    d.target.set_mode(Mode::HangOnce);
    d.call(
        "send_wire",
        json!({"customer": "umbrella", "amount": 50000}),
        json!({}),
        "",
    )
    .await?;
    d.call(
        "send_wire",
        json!({"customer": "umbrella", "amount": 50000}),
        json!({}),
        "   ← the agent retries",
    )
    .await?;
    line("why      irreversible: nothing is re-sent; `needs_review` until a human resolves it as applied or not applied");
    Ok(())
}

/// Scene 8: reads are never matched.
pub(super) async fn reads(d: &Demo) -> Result<()> {
    heading(8, "Reads are never matched: each call runs.");
    d.call("list_invoices", json!({}), json!({}), "").await?;
    d.call("list_invoices", json!({}), json!({}), "").await?;
    Ok(())
}

/// Scene 12: the audit chain exported and verified offline; whether it verified.
pub(super) async fn audit(stage: &Stage) -> Result<bool> {
    heading(12, "The audit chain, verified offline.");
    let public = postern_audit::SigningKey::from_hex(&std::fs::read_to_string(
        stage.dir.join("signing.key"),
    )?)?
    .verifying_key();
    stage.ledger.checkpoint(crate::now()).await?;
    let export = stage.dir.join("audit.jsonl");
    let status = std::process::Command::new(std::env::current_exe()?)
        .args([
            "audit",
            "export",
            "--store",
            &format!("sqlite://{}", stage.dir.join("ledger.db").display()),
            "--out",
        ])
        .arg(&export)
        .arg("--signing-key")
        .arg(stage.dir.join("signing.key"))
        .output()?;
    if !status.status.success() {
        line(format!(
            "export failed: {}",
            String::from_utf8_lossy(&status.stderr)
        ));
    }
    let report = crate::audit::verify_file(&export, postern_audit::Verifier::new(public))?;
    for l in report.to_string().lines() {
        line(l);
    }
    Ok(report.is_valid())
}

/// Where to look next.
pub(super) fn where_to_look(dir: &Path, first_id: &str, lost_id: &str) {
    println!();
    println!(
        "First invoice's full record: postern activity show {first_id} --store sqlite://{}",
        dir.join("ledger.db").display()
    );
    println!(
        "The lost answer of scene 2, investigated: postern activity trace {lost_id} --store sqlite://{}",
        dir.join("ledger.db").display()
    );
    println!(
        "Everything: postern activity list --store sqlite://{}",
        dir.join("ledger.db").display()
    );
}

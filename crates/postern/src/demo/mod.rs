//! `postern demo`: the product in two minutes, with nothing to install. A small invoice API and
//! the gateway start on loopback, a real MCP client plays a flaky agent, and every step prints
//! what the agent asked, what crossed to the target, what the ledger recorded and why.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use postern_core::ExecutionId;
use postern_gateway::demo_client::McpClient;
use postern_gateway::demo_target::{InvoiceApi, Mode};
use postern_gateway::front::listener::{ListenerLimits, PlainTcp};
use postern_ledger::Ledger;
use serde_json::{json, Value};

use crate::keys::{random_32, write_secret};

mod approval;
mod https;
mod upstream;

const TOKEN_FILE: &str = "agent.token";

fn config(target: &str, tls_target: &str, upstream_config: &str) -> String {
    let tls_tools = https::tools(tls_target);
    let approval_config = approval::config(target);
    format!(
        r#"[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}

[[actor]]
name = "billing-agent"
token = {{ file = "{TOKEN_FILE}" }}

[[tool]]
name = "create_invoice"
description = "Create an invoice"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}
recovery = {{ status_query = {{ method = "GET", url = "{target}/invoices?idempotency_key={{execution_id}}" }} }}

[[tool]]
name = "send_wire"
description = "Wire money to a customer (irreversible)"
class = "irreversible"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[tool]]
name = "list_invoices"
description = "List invoices"
class = "read_only"
http = {{ method = "GET", url = "{target}/invoices" }}
{tls_tools}{approval_config}{upstream_config}"#
    )
}

struct Demo {
    client: McpClient,
    ledger: Arc<Ledger>,
    target: InvoiceApi,
}

fn line(s: impl AsRef<str>) {
    println!("   {}", s.as_ref());
}

fn heading(n: u32, s: &str) {
    println!("\n{n}. {s}");
}

impl Demo {
    async fn call(&self, tool: &str, args: Value, extra: Value, note: &str) -> Result<Value> {
        let (id, body) = self.client.request(tool, args.clone(), extra.clone());
        line(format!(
            "agent  → tools/call {tool} {args}{} (JSON-RPC id {id}){note}",
            if extra == json!({}) {
                String::new()
            } else {
                format!(" {extra}")
            }
        ));
        let before = self.target.requests().len();
        let resp = self.client.send(&body, None).await?;
        self.show_target_traffic(before);
        self.show_answer(&resp).await?;
        Ok(resp)
    }

    fn show_target_traffic(&self, before: usize) {
        let seen = self.target.requests();
        if seen.len() == before {
            line("target ← nothing was sent to the target");
        }
        for r in &seen[before..] {
            let key = r
                .idempotency_key
                .as_ref()
                .map(|k| format!("  Idempotency-Key: {k}"))
                .unwrap_or_default();
            let query = r
                .query
                .as_ref()
                .map(|q| format!("?{q}"))
                .unwrap_or_default();
            line(format!("target ← {} {}{query}{key}", r.method, r.path));
        }
    }

    async fn show_answer(&self, resp: &Value) -> Result<()> {
        if let Some(err) = resp.get("error") {
            line(format!(
                "agent  ← error {}: {}",
                err["code"],
                err["message"].as_str().unwrap_or("")
            ));
            return Ok(());
        }
        let ex = &resp["result"]["structuredContent"]["execution"];
        line(format!(
            "agent  ← {} · execution {} · attempt {}{}",
            ex["state"].as_str().unwrap_or("?"),
            ex["execution_id"].as_str().unwrap_or("?"),
            ex["attempt"].as_str().unwrap_or("?"),
            ex["target_status"]
                .as_u64()
                .map(|s| format!(" · target said {s}"))
                .unwrap_or_default()
        ));
        if let Some(next) = ex["next_step"].as_str() {
            line(format!("         next step: {next}"));
        }
        if let Some(id) = ex["execution_id"]
            .as_str()
            .and_then(|s| s.parse::<ExecutionId>().ok())
        {
            // Give the delivery record a moment: it is written when the answer has left.
            tokio::time::sleep(Duration::from_millis(80)).await;
            if let Some(view) = self.ledger.execution(id).await? {
                let events: Vec<&str> = view.events.iter().map(|e| e.body.event.name()).collect();
                line(format!("ledger   {}", events.join(" → ")));
            }
        }
        Ok(())
    }

    fn invoices_for(&self, customer: &str) {
        line(format!(
            "target   holds {} invoice(s) for {customer}",
            self.target.count_for(customer)
        ));
    }
}

pub fn run() -> Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(demo())
}

fn write_files(dir: &Path, target: &str, tls_target: &str) -> Result<String> {
    let token = format!("demo-{}", hex::encode(random_32()?));
    write_secret(&dir.join("fp.key"), &hex::encode(random_32()?))?;
    write_secret(
        &dir.join("signing.key"),
        &postern_audit::SigningKey::from_bytes(random_32()?).to_hex(),
    )?;
    write_secret(&dir.join(TOKEN_FILE), &token)?;
    write_secret(
        &dir.join(approval::OPERATOR_TOKEN_FILE),
        &format!("demo-operator-{}", hex::encode(random_32()?)),
    )?;
    let upstream = upstream::config(&dir.join("upstream-journal.jsonl"))?;
    std::fs::write(
        dir.join("postern.toml"),
        config(target, tls_target, &upstream),
    )?;
    Ok(token)
}

async fn demo() -> Result<i32> {
    let dir = std::env::temp_dir().join(format!("postern-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let api = InvoiceApi::start()
        .await
        .context("starting the demo invoice API")?;
    let target_url = format!("http://{}", api.addr);
    let tls_api = https::start_api(&dir).await?;
    let tls_target_url = format!("https://{}", tls_api.addr);
    let token = write_files(&dir, &target_url, &tls_target_url)?;
    let assembled = crate::serve::assemble(&dir.join("postern.toml")).await?;
    let ledger = assembled.gateway.ledger().clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mcp_url = format!("http://{}/mcp", listener.local_addr()?);
    let vouch = postern_gateway::front::vouch(&assembled.gateway, &assembled.tokens);
    let app = postern_gateway::front::router(
        assembled.gateway.clone(),
        assembled.tokens,
        tokio_util::sync::CancellationToken::new(),
    );
    let limits = ListenerLimits::of(&assembled.gateway.config().gateway);
    tokio::spawn(postern_gateway::front::listener::serve(
        listener,
        PlainTcp,
        app,
        limits,
        vouch,
        std::future::pending(),
    ));

    println!(
        "Postern demo: an MCP action gateway where a lost answer never becomes a second action."
    );
    println!();
    line(format!(
        "invoice API (the target)   {target_url}   counts invoices per customer"
    ));
    line(format!("gateway (MCP, Streamable HTTP)   {mcp_url}"));
    line(format!(
        "ledger (SQLite, durable, hash-chained)   {}",
        dir.join("ledger.db").display()
    ));
    line("tools: create_invoice (idempotent_write, 10 min match window, status query)");
    line("       send_wire (irreversible), list_invoices (read_only),");
    line("       create_invoice_tls and create_invoice_public_roots (the same API over https),");
    line("       pay_supplier (every call approved by an operator),");
    line("       book_invoice (a tool of an upstream MCP server over stdio, irreversible)");
    let client = McpClient::connect(&mcp_url, &token, "postern-demo-agent").await?;
    let d = Demo {
        client,
        ledger: ledger.clone(),
        target: api.state.clone(),
    };

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
    let retry_client = McpClient::connect(&mcp_url, &token, "postern-demo-agent").await?;
    let retry = Demo {
        client: retry_client,
        ledger: ledger.clone(),
        target: api.state.clone(),
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

    heading(8, "Reads are never matched: each call runs.");
    d.call("list_invoices", json!({}), json!({}), "").await?;
    d.call("list_invoices", json!({}), json!({}), "").await?;

    let tls = Demo {
        client: McpClient::connect(&mcp_url, &token, "postern-demo-agent").await?,
        ledger: ledger.clone(),
        target: tls_api.state.clone(),
    };
    https::scene(9, &tls, &tls_target_url).await?;
    approval::scene(10, &d, &assembled.gateway).await?;
    let journal = dir.join("upstream-journal.jsonl");
    upstream::scene(11, &d, &journal, &mcp_url, &token).await?;

    // The demo's gateway stops here: its runs end in the Sessions log as a stopped gateway's.
    assembled.gateway.end_open_runs().await;

    heading(12, "The audit chain, verified offline.");
    let public =
        postern_audit::SigningKey::from_hex(&std::fs::read_to_string(dir.join("signing.key"))?)?
            .verifying_key();
    ledger.checkpoint(crate::now()).await?;
    let export = dir.join("audit.jsonl");
    let status = std::process::Command::new(std::env::current_exe()?)
        .args([
            "audit",
            "export",
            "--store",
            &format!("sqlite://{}", dir.join("ledger.db").display()),
            "--out",
        ])
        .arg(&export)
        .arg("--signing-key")
        .arg(dir.join("signing.key"))
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
    Ok(if report.is_valid() { 0 } else { 1 })
}

//! `postern demo`: the product in two minutes, with nothing to install. A small invoice API and
//! the gateway start on loopback, a real MCP client plays a flaky agent, and every step prints
//! what the agent asked, what crossed to the target, what the ledger recorded and why.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use postern_core::ExecutionId;
use postern_demo::client::McpClient;
use postern_demo::target::InvoiceApi;
use postern_front::listener::{ListenerLimits, PlainTcp};
use postern_ledger::Ledger;
use serde_json::{json, Value};

use crate::keys::{random_32, write_secret};

mod approval;
mod https;
mod scenes;
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
            if let Some(view) = self.ledger.read().execution(id).await? {
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
    let upstream = upstream::config(dir)?;
    std::fs::write(
        dir.join("postern.toml"),
        config(target, tls_target, &upstream),
    )?;
    Ok(token)
}

/// What the demo runs against: the two invoice APIs, the gateway serving MCP on loopback, and
/// the files they were made from.
struct Stage {
    dir: std::path::PathBuf,
    api: postern_demo::target::InvoiceApiHandle,
    tls_api: postern_demo::target::InvoiceApiHandle,
    target_url: String,
    tls_target_url: String,
    mcp_url: String,
    token: String,
    gateway: Arc<postern_pipeline::Gateway>,
    ledger: Arc<Ledger>,
}

/// Starts the APIs and the gateway (its config written to a fresh directory).
async fn stage() -> Result<Stage> {
    let dir = std::env::temp_dir().join(format!("postern-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let api = InvoiceApi::start()
        .await
        .context("starting the demo invoice API")?;
    let target_url = format!("http://{}", api.addr);
    let tls_api = https::start_api(&dir).await?;
    let tls_target_url = format!("https://{}", tls_api.addr);
    let token = write_files(&dir, &target_url, &tls_target_url)?;
    let assembled = crate::serve::assemble(&dir.join("postern.toml"), true).await?;
    let ledger = assembled.gateway.ledger().clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mcp_url = format!("http://{}/mcp", listener.local_addr()?);
    let vouch = postern_front::vouch(&assembled.gateway, &assembled.tokens);
    let gateway = assembled.gateway.clone();
    let app = postern_front::router(
        assembled.gateway,
        assembled.tokens,
        tokio_util::sync::CancellationToken::new(),
    );
    let limits = ListenerLimits::of(&gateway.config().gateway);
    tokio::spawn(postern_front::listener::serve(
        listener,
        PlainTcp,
        app,
        limits,
        vouch,
        std::future::pending(),
    ));
    Ok(Stage {
        dir,
        api,
        tls_api,
        target_url,
        tls_target_url,
        mcp_url,
        token,
        gateway,
        ledger,
    })
}

async fn demo() -> Result<i32> {
    let stage = stage().await?;
    scenes::introduce(&stage);
    let d = Demo {
        client: McpClient::connect(&stage.mcp_url, &stage.token, "postern-demo-agent").await?,
        ledger: stage.ledger.clone(),
        target: stage.api.state.clone(),
    };
    let first_id = scenes::new_invoice(&d).await?;
    let lost_id = scenes::lost_answer(&d, &stage).await?;
    scenes::cut_stream(&d).await?;
    scenes::keyed(&d).await?;
    scenes::unanswered(&d).await?;
    scenes::irreversible(&d).await?;
    scenes::reads(&d).await?;
    let tls = Demo {
        client: McpClient::connect(&stage.mcp_url, &stage.token, "postern-demo-agent").await?,
        ledger: stage.ledger.clone(),
        target: stage.tls_api.state.clone(),
    };
    https::scene(9, &tls, &stage.tls_target_url).await?;
    approval::scene(10, &d, &stage.gateway).await?;
    let journal = upstream::journal(&stage.dir);
    upstream::scene(11, &d, &journal, &stage.mcp_url, &stage.token).await?;
    // The demo's gateway stops here: its runs end in the Sessions log as a stopped gateway's.
    stage.gateway.runs().end_open().await;
    let valid = scenes::audit(&stage).await?;
    scenes::where_to_look(&stage.dir, &first_id, &lost_id);
    Ok(if valid { 0 } else { 1 })
}

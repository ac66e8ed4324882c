//! `postern activity list|show`: the Activity log, a read-only view over the ledger.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use postern_core::ExecutionId;
use postern_ledger::{ExecutionSummary, ListFilter, StoreReader};
use serde_json::{json, Value};

use crate::terminal::shown;

#[derive(Subcommand)]
pub enum ActivityCommand {
    /// Executions, newest first.
    List(ListArgs),
    /// One execution: its lifecycle with timestamps, fingerprint, target status, delivery.
    Show(ShowArgs),
    /// The five questions of an incident answered from the record, with the evidence: one
    /// agent process or two; authorized and dispatched; did the target answer; was the answer
    /// lost after completion; did a later call reuse the execution, the key, or make a new
    /// attempt. With --fingerprint or --key: every execution of that intent or key, side by
    /// side, each with why it is separate from the one before.
    Trace(TraceArgs),
}

#[derive(Args)]
pub struct TraceArgs {
    #[command(flatten)]
    store: StoreChoice,
    /// The execution id (exe_…).
    #[arg(required_unless_present_any = ["fingerprint", "key"], conflicts_with_all = ["fingerprint", "key"])]
    pub(crate) id: Option<String>,
    /// Every execution of this fingerprint (hmac-sha256:… as `activity show` prints it).
    #[arg(long, conflicts_with = "key")]
    pub(crate) fingerprint: Option<String>,
    /// Every execution this operation key reached (with --actor: keys are per actor).
    #[arg(long, requires = "actor")]
    pub(crate) key: Option<String>,
    /// Only this actor's executions.
    #[arg(long)]
    pub(crate) actor: Option<String>,
}

#[derive(Args)]
pub struct StoreChoice {
    /// The store URL; defaults to the config's `[gateway] store`.
    #[arg(long)]
    store: Option<String>,
    #[arg(long, short, default_value = "postern.toml")]
    config: PathBuf,
    /// Machine-readable JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    store: StoreChoice,
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Only this actor's executions.
    #[arg(long)]
    actor: Option<String>,
    /// Only this tool's executions.
    #[arg(long)]
    tool: Option<String>,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    store: StoreChoice,
    /// The execution id (exe_…).
    id: String,
}

/// The store, read-only: looking at the Activity log never migrates, registers an instance or
/// runs the recovery scan (which could record `outcome_unknown` for a live gateway's work).
async fn open(s: &StoreChoice) -> Result<StoreReader> {
    let url = match &s.store {
        Some(u) => u.clone(),
        // A relative SQLite path is relative to the config file, as `serve` reads it.
        None => crate::resolve_store_path(
            &crate::load_config(&s.config)?.gateway.store,
            &crate::config_dir(&s.config),
        ),
    };
    Ok(StoreReader::open(&url).await?)
}

fn summary_json(e: &ExecutionSummary) -> Value {
    json!({
        "execution_id": e.id.to_string(),
        "actor": e.actor,
        "tool": e.tool,
        "class": e.class.as_str(),
        "state": e.lifecycle.state.display_name(),
        "outcome": e.lifecycle.state.outcome(),
        "dispatches": e.lifecycle.dispatches,
        "fingerprint": e.fingerprint.to_string(),
        "operation_key": e.operation_key,
        "accepted_at": e.accepted_at.to_string(),
        "first_dispatched_at": e.first_dispatched_at.map(|t| t.to_string()),
        "run_id": e.run_id,
    })
}

/// The widest an actor's and a tool's column get (a longer name is cut, ending in '…').
const MAX_ACTOR: usize = 24;
const MAX_TOOL: usize = 40;

/// `activity list`'s table: each state by its lifecycle name (`delivered(applied)`), as
/// `activity trace` and `show` say it.
fn list_lines(rows: &[ExecutionSummary]) -> Vec<String> {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                e.accepted_at.to_string(),
                shown(&e.actor).into_owned(),
                shown(&e.tool).into_owned(),
                e.lifecycle.state.name().to_string(),
                e.lifecycle.dispatches.to_string(),
            ]
        })
        .collect();
    let header = ["EXECUTION", "ACCEPTED", "ACTOR", "TOOL", "STATE", "SENT"];
    crate::terminal::table(&header, &cells, &[0, 0, MAX_ACTOR, MAX_TOOL, 0, 0])
}

pub fn run(cmd: &ActivityCommand) -> Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        match cmd {
            ActivityCommand::List(a) => {
                let ledger = open(&a.store).await?;
                let rows = ledger.list(&ListFilter { actor: a.actor.clone(), tool: a.tool.clone(), limit: a.limit, ..Default::default() }).await?;
                if a.store.json {
                    println!("{}", serde_json::to_string_pretty(&rows.iter().map(summary_json).collect::<Vec<_>>())?);
                } else {
                    for line in list_lines(&rows) {
                        println!("{line}");
                    }
                }
            }
            ActivityCommand::Trace(a) => {
                let filter = ListFilter {
                    actor: a.actor.clone(),
                    fingerprint: a.fingerprint.clone(),
                    operation_key: a.key.clone(),
                    ..ListFilter::default()
                };
                let store = open(&a.store).await?;
                return crate::trace::run(a.id.as_deref(), filter, store, a.store.json).await;
            }
            ActivityCommand::Show(a) => {
                let id: ExecutionId = a.id.parse()?;
                let ledger = open(&a.store).await?;
                let Some(view) = ledger.execution(id).await? else {
                    bail!("no execution {id} in this store");
                };
                let events: Vec<Value> = view
                    .events
                    .iter()
                    .map(|e| json!({"n": e.body.n, "event": e.body.event.name(), "at": e.body.at.to_string(), "detail": e.body.detail, "seq": e.body.seq, "chain": e.body.chain}))
                    .collect();
                if a.store.json {
                    let mut out = summary_json(&view.summary);
                    out["record"] = view.record.clone();
                    out["events"] = Value::Array(events);
                    out["result"] = view.result.as_ref().map_or(Value::Null, |r| json!({"digest": r.digest, "size": r.size, "truncated": r.truncated, "body": String::from_utf8_lossy(&r.body)}));
                    println!("{}", serde_json::to_string_pretty(&out)?);
                } else {
                    let s = &view.summary;
                    println!("execution    {}", s.id);
                    println!("tool         {} ({})", shown(&s.tool), s.class);
                    println!("actor        {}   intent scope {}", shown(&s.actor), shown(&s.intent_scope));
                    println!("fingerprint  {}", s.fingerprint);
                    println!("state        {}", s.lifecycle.state.name());
                    println!("record       {}", shown(&view.record.to_string()));
                    if let Some(hints) = view.events.iter().find_map(|e| e.body.detail.get("upstream_annotations")) {
                        println!("upstream     annotations {} (the upstream's own claim, untrusted: the class decides)", shown(&hints.to_string()));
                    }
                    println!("lifecycle:");
                    for e in &view.events {
                        println!("  {}  {:<22} {}", e.body.at, e.body.event.name(), shown(&e.body.detail.to_string()));
                    }
                    if let Some(r) = &view.result {
                        println!("result       {} bytes{} {}", r.size, if r.truncated { " (truncated)" } else { "" }, r.digest);
                        println!("             {}", shown(&String::from_utf8_lossy(&r.body)));
                    }
                }
            }
        }
        Ok(0)
    })
}

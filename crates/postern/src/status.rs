//! `postern status`: a running gateway's health at a glance, from `GET /ops/status`.

use anyhow::Result;
use clap::Args;
use serde_json::Value;

use crate::operator::{runtime, GatewayArgs, Ops};
use crate::terminal::text;

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    gateway: GatewayArgs,
}

/// Exit code 0 when nothing needs a person; 1 when something does (reviews pending, an
/// upstream down, the vault locked, the store unreadable), so a script can alert on it.
pub fn run(a: &StatusArgs) -> Result<i32> {
    runtime()?.block_on(async {
        let ops = Ops::new(&a.gateway)?;
        let s = ops.get("/ops/status").await?;
        ops.print(&s, print);
        Ok(i32::from(!attention(&s).is_empty()))
    })
}

/// What needs a person, in words.
fn attention(s: &Value) -> Vec<String> {
    let mut needs = Vec::new();
    if s["store_state"] != "ok" {
        needs.push(format!(
            "the store cannot be read: {}",
            text(&s["store_state"])
        ));
    }
    if s["reviews_pending"].as_u64().unwrap_or(0) > 0 {
        needs.push(format!(
            "{} execution(s) need review: postern review list",
            s["reviews_pending"]
        ));
    }
    for u in s["upstreams"].as_array().into_iter().flatten() {
        if u["up"] != true {
            needs.push(format!(
                "upstream {} is down: {}",
                text(&u["name"]),
                text(&u["why"])
            ));
        }
    }
    if s["vault"] == "locked" {
        needs.push("the vault is locked: postern vault unlock".into());
    }
    if s["signing_refused"].is_string() {
        needs.push(format!(
            "checkpoints are no longer signed: {}; run postern audit verify --store on this store and find who wrote it",
            text(&s["signing_refused"])
        ));
    }
    needs
}

fn print(s: &Value) {
    let num = |k: &str| s[k].as_u64().unwrap_or(0);
    println!(
        "gateway      instance {} on {} (store {}, read in {:.1} ms, {} write(s) queued)",
        text(&s["instance"]),
        text(&s["store"]),
        text(&s["store_state"]),
        s["store_read_seconds"].as_f64().unwrap_or(0.0) * 1000.0,
        num("ledger_queue")
    );
    let upstreams = s["upstreams"].as_array().cloned().unwrap_or_default();
    if upstreams.is_empty() {
        println!("upstreams    none configured");
    }
    for u in &upstreams {
        let state = if u["up"] == true {
            "up".to_string()
        } else {
            format!("DOWN ({})", text(&u["why"]))
        };
        let withheld = u["withheld_tools"].as_u64().unwrap_or(0);
        let pid = u["pid"]
            .as_u64()
            .map(|p| format!(" (pid {p})"))
            .unwrap_or_default();
        println!(
            "upstream     {} {state}{pid}{}",
            text(&u["name"]),
            if withheld > 0 {
                format!(", {withheld} tool(s) withheld until accepted")
            } else {
                String::new()
            }
        );
    }
    println!("vault        {}", text(&s["vault"]));
    let oldest = s["oldest_approval_age_seconds"]
        .as_f64()
        .map(|a| format!(", oldest waiting {a:.0} s"))
        .unwrap_or_default();
    println!("approvals    {} pending{oldest}", num("approvals_pending"));
    println!("reviews      {} pending", num("reviews_pending"));
    println!(
        "unknown      {} execution(s) with an unknown outcome ({} of them became unknown in the last hour); {} dispatched and not yet answered",
        num("outcome_unknown"),
        num("outcome_unknown_last_hour"),
        num("dispatched")
    );
    println!("runs         {} open on this instance", num("runs_open"));
    match s["last_checkpoint"].as_object() {
        Some(c) => println!(
            "checkpoint   {} seq {} at {} ({:.0} s ago)",
            text(&c["chain"]),
            c["seq"],
            text(&c["at"]),
            c["age_seconds"].as_f64().unwrap_or(0.0)
        ),
        None => println!("checkpoint   none signed yet"),
    }
    if s["signing_refused"].is_string() {
        println!("signing      REFUSED: {}", text(&s["signing_refused"]));
    }
    let needs = attention(s);
    if needs.is_empty() {
        println!("\nnothing needs a person");
    } else {
        println!();
        for n in needs {
            println!("needs attention: {n}");
        }
    }
}

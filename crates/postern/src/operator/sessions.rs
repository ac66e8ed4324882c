//! `postern sessions …`: the Sessions log as an operator reads it (the runs, one run with every
//! call it made), and a run authorized or revoked.

use anyhow::Result;
use serde_json::{json, Value};

use crate::operator::{runtime, segment, Ops, SessionsCommand};
use crate::terminal::{shown, text};

pub fn sessions(cmd: &SessionsCommand) -> Result<i32> {
    runtime()?.block_on(async {
        let (ops, path, verb) = match cmd {
            SessionsCommand::List(a) => {
                let ops = Ops::new(a)?;
                let v = ops.get("/ops/runs").await?;
                ops.print(&v, |v| {
                    let runs = v["runs"].as_array().map(Vec::as_slice).unwrap_or_default();
                    if runs.is_empty() {
                        println!("no runs yet");
                    }
                    println!(
                        "{:<52} {:<16} {:<24} {:<24} {:<30} AUTHORIZATION",
                        "RUN", "ACTOR", "CLIENT", "STARTED", "ENDED"
                    );
                    for r in runs {
                        println!(
                            "{:<52} {:<16} {:<24} {:<24} {:<30} {}{}",
                            text(&r["run_id"]),
                            text(&r["actor"]),
                            client(r),
                            text(&r["started_at"]),
                            ended(r),
                            text(&r["authorization"]),
                            decided_by(r)
                        );
                    }
                });
                return Ok(0);
            }
            SessionsCommand::Show { run, gateway } => {
                let ops = Ops::new(gateway)?;
                let r = ops.get(&format!("/ops/runs/{}", segment(run))).await?;
                ops.print(&r, |r| {
                    println!("run          {}", text(&r["run_id"]));
                    println!("actor        {}", text(&r["actor"]));
                    println!("client       {}", client(r));
                    if let Some(p) = r.get("principal").filter(|p| p.is_object()) {
                        println!(
                            "acting for   {} of {} (client {})",
                            text(&p["subject"]),
                            text(&p["issuer"]),
                            text(&p["client_id"])
                        );
                    }
                    println!(
                        "protocol     {} over {}",
                        text(&r["protocol_version"]),
                        text(&r["transport"])
                    );
                    println!("started      {}", text(&r["started_at"]));
                    println!("ended        {}", ended(r));
                    println!(
                        "authorized   {}{}",
                        text(&r["authorization"]),
                        decided_by(r)
                    );
                    let calls = r["calls"].as_array().map(Vec::as_slice).unwrap_or_default();
                    println!("calls        {}", calls.len());
                    for c in calls {
                        println!(
                            "  {}  id {:<8} {:<20} {:<10} {:<32} {}",
                            text(&c["at"]),
                            shown(c["request_id"].as_str().unwrap_or("-")),
                            text(&c["tool"]),
                            text(&c["attempt"]),
                            shown(c["execution_id"].as_str().unwrap_or("-")),
                            text(&c["outcome"])
                        );
                    }
                });
                return Ok(0);
            }
            SessionsCommand::Authorize { run, gateway } => (Ops::new(gateway)?, run, "authorize"),
            SessionsCommand::Revoke { run, gateway } => (Ops::new(gateway)?, run, "revoke"),
        };
        let v = ops
            .post(&format!("/ops/runs/{}/{verb}", segment(path)), json!({}))
            .await?;
        ops.print(&v, |v| {
            println!("run {}: {}", text(&v["run_id"]), text(&v["authorization"]))
        });
        Ok(0)
    })
}

fn client(r: &Value) -> String {
    let named = match (r["client"].as_str(), r["client_version"].as_str()) {
        (Some(n), Some(v)) => format!("{} {}", shown(n), shown(v)),
        (Some(n), None) => shown(n).into_owned(),
        _ => "-".to_string(),
    };
    match r["client_address"].as_str() {
        Some(from) => format!("{named} from {}", shown(from)),
        None => named,
    }
}

/// " by OPERATOR" of a run's authorization or revocation, if any.
fn decided_by(r: &Value) -> String {
    r["authorized_by"]
        .as_str()
        .or(r["revoked_by"].as_str())
        .map(|by| format!(" by {}", shown(by)))
        .unwrap_or_default()
}

fn ended(r: &Value) -> String {
    match (r["ended_at"].as_str(), r["end_reason"].as_str()) {
        (Some(t), Some(how)) => format!("{} ({})", shown(t), shown(how)),
        (Some(t), None) => shown(t).into_owned(),
        _ => "open".to_string(),
    }
}

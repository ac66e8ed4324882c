//! `postern budgets`: each `[[budget]]` of a running gateway and its use now, per scope, from
//! `GET /ops/budgets`.

use anyhow::Result;
use clap::Args;
use serde_json::Value;

use crate::operator::{runtime, GatewayArgs, Ops};
use crate::terminal::text;

#[derive(Args)]
pub struct BudgetsArgs {
    #[command(flatten)]
    gateway: GatewayArgs,
}

pub fn run(a: &BudgetsArgs) -> Result<i32> {
    runtime()?.block_on(async {
        let ops = Ops::new(&a.gateway)?;
        let v = ops.get("/ops/budgets").await?;
        ops.print(&v, print);
        Ok(0)
    })
}

fn print(v: &Value) {
    let budgets = v["budgets"].as_array().cloned().unwrap_or_default();
    if budgets.is_empty() {
        println!("no [[budget]] is configured");
    }
    for b in budgets {
        let mut limits = Vec::new();
        if let Some(max) = b["max_calls"].as_u64() {
            limits.push(format!("{max} calls"));
        }
        if let Some(sum) = b["sum"].as_array() {
            limits.push(format!("{} summed over {}", text(&sum[1]), text(&sum[0])));
        }
        println!(
            "{}: at most {} per {}s of {} (past it: {})",
            text(&b["name"]),
            limits.join(" and "),
            b["window_seconds"],
            b["tools"].as_array().map_or(String::new(), |t| t
                .iter()
                .map(text)
                .collect::<Vec<_>>()
                .join(", ")),
            text(&b["on_exhausted"]),
        );
        let scopes = b["scopes"].as_array().cloned().unwrap_or_default();
        if scopes.is_empty() {
            println!("  nothing counted in the window");
        }
        for s in scopes {
            let scope = match text(&s["scope"]) {
                x if x.is_empty() => "all calls".to_string(),
                x => x.into_owned(),
            };
            let frees = s["frees_at"]
                .as_str()
                .map_or(String::new(), |f| format!(", frees up from {f}"));
            // A budget that sums nothing shows no sum.
            let summed = match b["sum"].is_null() {
                true => String::new(),
                false => format!(", {} summed", text(&s["sum"])),
            };
            println!(
                "  {scope}: {} calls{summed}, {:.0}% used{frees}",
                s["calls"],
                s["used"].as_f64().unwrap_or(0.0) * 100.0
            );
        }
    }
}

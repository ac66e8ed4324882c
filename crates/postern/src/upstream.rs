//! `postern upstream list|accept`: the upstream MCP servers on a running gateway, and the
//! acceptance of a tool version an upstream changed (tool pinning). A client of `/ops`.

use anyhow::Result;
use clap::Subcommand;
use serde_json::{json, Value};

use crate::operator::{runtime, segment, GatewayArgs, Ops};
use crate::terminal::{shown, text};

#[derive(Subcommand)]
pub enum UpstreamCommand {
    /// Each upstream's link and its re-exported tools: served, or withheld with why (a changed
    /// tool is shown with the difference between the accepted and the listed definition).
    List(GatewayArgs),
    /// Accepts the version of TOOL that upstream NAME lists now, after showing how it differs
    /// from the accepted one: the tool is served again, and the acceptance is chained in the
    /// audit log.
    Accept {
        name: String,
        tool: String,
        /// Accept only this version (the listed digest `list` printed): a version that changed
        /// again since is refused.
        #[arg(long)]
        digest: Option<String>,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
}

pub fn run(cmd: &UpstreamCommand) -> Result<i32> {
    runtime()?.block_on(async {
        match cmd {
            UpstreamCommand::List(a) => {
                let ops = Ops::new(a)?;
                let v = ops.get("/ops/upstreams").await?;
                ops.print(&v, print_upstreams);
            }
            UpstreamCommand::Accept {
                name,
                tool,
                digest,
                gateway,
            } => {
                let ops = Ops::new(gateway)?;
                let v = ops.get("/ops/upstreams").await?;
                if let Some(t) = find(&v, name, tool) {
                    print_diff(t);
                }
                let body = match digest {
                    Some(d) => json!({"digest": d}),
                    None => json!({}),
                };
                let path = format!(
                    "/ops/upstreams/{}/tools/{}/accept",
                    segment(name),
                    segment(tool)
                );
                let v = ops.post(&path, body).await?;
                ops.print(&v, |v| {
                    println!(
                        "accepted {}/{} sha256:{} (by {})",
                        text(&v["upstream"]),
                        text(&v["tool"]),
                        text(&v["digest"]),
                        text(&v["accepted_by"])
                    )
                });
            }
        }
        Ok(0)
    })
}

fn find<'a>(v: &'a Value, name: &str, tool: &str) -> Option<&'a Value> {
    v["upstreams"]
        .as_array()?
        .iter()
        .find(|u| u["name"] == name)?["tools"]
        .as_array()?
        .iter()
        .find(|t| t["tool"] == tool)
}

fn print_upstreams(v: &Value) {
    let upstreams = v["upstreams"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if upstreams.is_empty() {
        println!("no upstream MCP servers are configured");
    }
    for u in upstreams {
        let pid = u["pid"]
            .as_u64()
            .map(|p| format!(", pid {p}"))
            .unwrap_or_default();
        match u["down"].as_str() {
            None => println!("{}: up{pid}", text(&u["name"])),
            Some(why) => println!("{}: DOWN ({}){pid}", text(&u["name"]), shown(why)),
        }
        if let Some(names) = u["environment"].as_array() {
            let names: Vec<_> = names.iter().map(text).collect();
            println!("  environment (names only): {}", names.join(" "));
        }
        for t in u["tools"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let digest = t["listed_digest"].as_str().map(|d| &d[..12.min(d.len())]);
            println!(
                "  {:<32} {:<10} {:<18} {}",
                text(&t["tool"]),
                text(&t["state"]),
                shown(t["class"].as_str().unwrap_or("-")),
                digest.map(|d| format!("sha256:{d}")).unwrap_or_default()
            );
            if let Some(why) = t["class_why"].as_str() {
                println!("    class: {}", shown(why));
            }
            if let Some(why) = t["why"].as_str() {
                println!("    {}", shown(why));
                print_diff(t);
            }
        }
    }
}

/// The accepted and the listed definitions, line by line: `-` only in the accepted one, `+`
/// only in the listed one.
fn print_diff(t: &Value) {
    let (Some(old), Some(new)) = (
        t["accepted_definition"].as_str(),
        t["listed_definition"].as_str(),
    ) else {
        return;
    };
    println!(
        "    accepted sha256:{}  listed sha256:{}",
        text(&t["accepted_digest"]),
        text(&t["listed_digest"])
    );
    let (old_lines, new_lines): (Vec<&str>, Vec<&str>) =
        (old.lines().collect(), new.lines().collect());
    for line in &old_lines {
        if !new_lines.contains(line) {
            println!("    - {}", shown(line));
        }
    }
    for line in &new_lines {
        if !old_lines.contains(line) {
            println!("    + {}", shown(line));
        }
    }
}

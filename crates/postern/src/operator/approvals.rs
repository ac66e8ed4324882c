//! `postern approvals …`: the calls awaiting an approval, one approval request as the operator
//! decides on it (what would be sent, by whom, until when), and the decisions, approve (after
//! asking, on a terminal) and deny.

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::operator::{print_list, print_more, runtime, segment, ApprovalsCommand, Ops};
use crate::terminal::{shown, text};

pub fn approvals(cmd: &ApprovalsCommand) -> Result<i32> {
    runtime()?.block_on(async {
        match cmd {
            ApprovalsCommand::List(a) => {
                let ops = Ops::new(a)?;
                let v = ops.get("/ops/approvals").await?;
                ops.print(&v, |v| {
                    print_list(&v["approvals"], "no call awaits approval");
                    print_more(v, "/ops/approvals");
                });
            }
            ApprovalsCommand::Show { execution, gateway } => {
                let ops = Ops::new(gateway)?;
                let v = ops
                    .get(&format!("/ops/approvals/{}", segment(execution)))
                    .await?;
                ops.print(&v, print_one);
            }
            ApprovalsCommand::Approve {
                execution,
                reason,
                fingerprint,
                yes,
                gateway,
            } => {
                let ops = Ops::new(gateway)?;
                // What is approved is what was shown: the approval carries its fingerprint.
                let shown = ops
                    .get(&format!("/ops/approvals/{}", segment(execution)))
                    .await?;
                let current = shown["fingerprint"].as_str().unwrap_or_default();
                let fingerprint = match fingerprint {
                    Some(f) => f.as_str(),
                    None => {
                        confirm(&shown, *yes)?;
                        current
                    }
                };
                let v = ops
                    .post(
                        &format!("/ops/approvals/{}/approve", segment(execution)),
                        json!({"fingerprint": fingerprint, "reason": reason}),
                    )
                    .await?;
                ops.print(&v, |v| {
                    print_one(&shown);
                    println!("approved: {} is {}", execution, text(&v["state"]));
                });
            }
            ApprovalsCommand::Deny {
                execution,
                reason,
                gateway,
            } => {
                let ops = Ops::new(gateway)?;
                let v = ops
                    .post(
                        &format!("/ops/approvals/{}/deny", segment(execution)),
                        json!({"reason": reason}),
                    )
                    .await?;
                ops.print(&v, |v| {
                    println!("denied: {} is {}", execution, text(&v["state"]))
                });
            }
        }
        Ok(0)
    })
}

/// On a terminal, shows the call and asks before approving it (a person approves what they
/// saw); elsewhere (a script) approves what is shown now.
fn confirm(shown: &Value, yes: bool) -> Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if yes || !std::io::stdin().is_terminal() {
        return Ok(());
    }
    print_one(shown);
    print!("approve this call? [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        bail!("not approved (nothing was changed)")
    }
}

/// The request as it will be sent (the record above leaves out non-semantic fields), or why it
/// cannot be shown.
fn print_request(request: &Value) {
    if request.is_null() {
        println!("sent as      (this gateway does not hold the call's arguments now: an approval applies to the record above, and the next identical call supplies them)");
        return;
    }
    println!("sent to      {}", shown(&request["target"].to_string()));
    println!("sent as      {}", shown(&request["arguments"].to_string()));
    let names: Vec<_> = request["non_semantic"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(text)
        .collect();
    if !names.is_empty() {
        println!(
            "non-semantic {} (sent, but outside the fingerprint: not what is approved)",
            names.join(", ")
        );
    }
}

fn print_one(p: &Value) {
    println!("execution    {}", text(&p["execution_id"]));
    println!("state        {}", text(&p["state"]));
    println!("tool         {}", text(&p["tool"]));
    println!("actor        {}", text(&p["actor"]));
    if let Some(run) = p["run_id"].as_str() {
        println!("run          {}", shown(run));
    }
    // JSON text escapes control characters but not invisible formatting (a bidi override).
    println!(
        "arguments    {}",
        shown(&p["record"]["arguments"].to_string())
    );
    print_request(&p["request"]);
    println!("fingerprint  {}", text(&p["fingerprint"]));
    println!("since        {}", text(&p["since"]));
    if let Some(e) = p["expires_at"].as_str() {
        println!("expires      {}", shown(e));
    }
    if let Some(d) = p["decided"].as_object() {
        println!(
            "decided      {} by {} at {}{}",
            shown(d.get("decision").and_then(Value::as_str).unwrap_or("?")),
            shown(
                d.get("by")
                    .and_then(Value::as_str)
                    .unwrap_or("nobody (expired)")
            ),
            shown(d.get("at").and_then(Value::as_str).unwrap_or("?")),
            d.get("reason")
                .and_then(Value::as_str)
                .map(|r| format!(": {}", shown(r)))
                .unwrap_or_default()
        );
    }
}

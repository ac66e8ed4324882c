//! `--approvals [--baseline-postern PATH]` (issue 14): what the human side costs.
//!
//! 1. Calls that need no approval, through this build and through a baseline build (the tree
//!    before approvals, sessions and the vault), alternately A B A B so that drift on a shared
//!    machine falls on both: c=1 p50 and c=64 calls/s, printed as B/A ratios.
//! 2. Approve → target: calls of a tool with `approval = "every_call"`, each approved through
//!    the operator API (`POST /ops/approvals/{id}/approve`); the time from sending the approval
//!    to the target receiving the call (the target runs in this process and is polled every
//!    50 µs), beside the time the approval's answer took.

use std::path::Path;
use std::time::{Duration, Instant};

use postern_demo::target::InvoiceApi;
use serde_json::{json, Value};

use super::{config, run, sse_message, Budget, Client, Served, WITH_SESSION};

const OPERATOR_TOKEN: &str = "bench-operator-token-0123456789ab";

/// Prints both parts; `baseline` is the binary of the tree before approvals.
pub async fn compare(
    postern: &Path,
    baseline: Option<&Path>,
    dir: &Path,
    seconds: f64,
    calls: usize,
    rounds: usize,
) {
    let api = InvoiceApi::start().await.unwrap();
    let target = format!("http://{}", api.addr);
    if let Some(baseline) = baseline {
        println!(
            "calls that need no approval: this build (A) against {} (B), A B A B",
            baseline.display()
        );
        let mut rows: Vec<(&str, f64, f64)> = Vec::new();
        for round in 0..rounds {
            for (name, bin) in [("A", postern), ("B", baseline)] {
                // A gateway per level: the c=64 workers need 64 sessions of one actor, its
                // whole per-actor limit.
                let start = |level: &str| {
                    let sub = dir.join(format!("ab-{name}-{round}-{level}"));
                    std::fs::create_dir_all(&sub).unwrap();
                    Served::start(bin, &sub, &target)
                };
                let (c1, c64) = ab_round(&api.state, start, calls, seconds).await;
                println!("  round {round} {name}: c=1 p50 {c1:.3} ms, c=64 {c64:.0} calls/s");
                rows.push((name, c1, c64));
            }
        }
        let mean = |who: &str, f: fn(&(&str, f64, f64)) -> f64| super::mean_of(&rows, who, f);
        let (a1, b1) = (mean("A", |r| r.1), mean("B", |r| r.1));
        let (a64, b64) = (mean("A", |r| r.2), mean("B", |r| r.2));
        println!(
            "  c=1 p50: A {a1:.3} ms, B {b1:.3} ms, A/B {:.3}; c=64: A {a64:.0}, B {b64:.0} calls/s, A/B {:.3} (goal: within 5%)",
            a1 / b1,
            a64 / b64
        );
    }
    approve_to_target(postern, dir, &api, &target, calls.min(300)).await;
}

/// One round of an A/B comparison: c=1 for `calls` calls, then c=64 for `seconds`, each on a
/// gateway of its own (the c=64 workers need 64 sessions of one actor, its whole per-actor
/// limit); (c=1 p50 in ms, c=64 calls/s).
pub async fn ab_round(
    api: &postern_demo::target::InvoiceApi,
    start: impl Fn(&str) -> Served,
    calls: usize,
    seconds: f64,
) -> (f64, f64) {
    let served = start("c1");
    let c1 = run(
        api,
        Some(WITH_SESSION),
        &served.url,
        1,
        Budget::Calls(calls),
        "ab1",
    )
    .await;
    drop(served);
    let served = start("c64");
    let c64 = run(
        api,
        Some(WITH_SESSION),
        &served.url,
        64,
        Budget::Seconds(seconds),
        "ab64",
    )
    .await;
    drop(served);
    (c1.pct(0.5), c64.rate)
}

/// The approval part: `n` calls, each approved; p50/p90/max from approval to the target.
async fn approve_to_target(
    postern: &Path,
    dir: &Path,
    api: &postern_demo::target::InvoiceApiHandle,
    target: &str,
    n: usize,
) {
    let sub = dir.join("approve");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("op.token"), OPERATOR_TOKEN).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(sub.join("op.token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = format!(
        r#"{}
[[operator]]
name = "bench-operator"
token = {{ file = "op.token" }}

[[tool]]
name = "approved_invoice"
class = "idempotent_write"
match_window = "10m"
approval = "every_call"
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "5s" }}
"#,
        config(target, "10m", None)
    );
    let served = Served::start_with(postern, &sub, text, &[]);
    let ops = served.url.trim_end_matches("/mcp").to_string();
    let mut client = Client::connect(Some(WITH_SESSION), &served.url).await;
    let http = reqwest::Client::new();
    api.state.reset();
    let (mut to_target, mut answered) = (Vec::new(), Vec::new());
    for i in 0..n {
        client.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": client.next_id, "method": "tools/call", "params": {"name": "approved_invoice", "arguments": {"customer": format!("approve-{i}"), "amount": i}}});
        let text = client
            .mcp_post(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let ex = sse_message(&text)["result"]["structuredContent"]["execution"].clone();
        assert_eq!(ex["state"], "awaiting_approval", "{text}");
        let id = ex["execution_id"].as_str().unwrap().to_string();
        let shown = http
            .get(format!("{ops}/ops/approvals/{id}"))
            .header("authorization", format!("Bearer {OPERATOR_TOKEN}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let shown: Value = serde_json::from_str(&shown).unwrap();
        let approval = json!({"fingerprint": shown["fingerprint"]}).to_string();
        let before = api.state.requests().len();
        let started = Instant::now();
        let approving = async {
            let answer = http
                .post(format!("{ops}/ops/approvals/{id}/approve"))
                .header("authorization", format!("Bearer {OPERATOR_TOKEN}"))
                .header("content-type", "application/json")
                .body(approval.clone())
                .send()
                .await;
            (answer, started.elapsed())
        };
        let ((answer, took), reached) = tokio::join!(approving, async {
            while api.state.requests().len() == before {
                tokio::time::sleep(Duration::from_micros(50)).await;
            }
            started.elapsed()
        });
        assert!(answer.unwrap().status().is_success());
        answered.push(took);
        to_target.push(reached);
    }
    to_target.sort_unstable();
    answered.sort_unstable();
    let q =
        |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
    println!(
        "approve → target ({n} calls, one at a time): p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms (goal: p50 ≤ 5 ms); the approval's own answer p50 {:.2} ms",
        q(&to_target, 0.5),
        q(&to_target, 0.9),
        q(&to_target, 1.0),
        q(&answered, 0.5)
    );
}

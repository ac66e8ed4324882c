//! `--sessions N`: the per-actor session cap under careless agents (issue 35). One actor opens
//! sessions and never ends them; at `max_sessions_per_actor` (default 64) each new one evicts
//! the least recently used idle session. Prints:
//! - the cost of an `initialize` at the cap (it evicts one) against one below it (the same
//!   request on a gateway where a `DELETE` keeps the actor under the cap), in alternating
//!   rounds of the same run;
//! - the gateway's RSS after `N` sessions opened and abandoned, against its idle RSS measured
//!   in the same process before them (goal: at most 1.5×).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{Served, TOKEN};

const ROUNDS: usize = 4;
const PER_ROUND: usize = 250;
/// Careless agents at once unless `--concurrency` says otherwise: the sessions being opened
/// count against the cap too, so fewer than it.
pub(crate) const AGENTS: usize = 32;
/// How long the bench waits after the churn before it reads the RSS again (past the stream
/// sweep's retention of streams carried a moment ago).
const SETTLE: Duration = Duration::from_secs(70);

/// Opens one session (`initialize` + `notifications/initialized`); returns its id and how long
/// the `initialize` took. Panics unless both are accepted.
async fn open(http: &reqwest::Client, url: &str) -> (String, Duration) {
    let (id, took, noted) = try_open(http, url).await;
    assert!(noted, "initialized: 404 (the session was evicted at once)");
    (id, took)
}

/// As [`open`]; the last value says whether `notifications/initialized` found the session
/// (under churn it may already have been evicted: 404).
async fn try_open(http: &reqwest::Client, url: &str) -> (String, Duration, bool) {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "careless", "version": "1"}}});
    let started = Instant::now();
    let resp = post(http, url, None).json(&init).send().await.unwrap();
    assert!(resp.status().is_success(), "initialize: {}", resp.status());
    let id = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    resp.bytes().await.unwrap();
    let took = started.elapsed();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = post(http, url, Some(&id)).json(&note).send().await.unwrap();
    let noted = resp.status().is_success();
    assert!(
        noted || resp.status() == 404,
        "initialized: {}",
        resp.status()
    );
    (id, took, noted)
}

fn post(http: &reqwest::Client, url: &str, session: Option<&str>) -> reqwest::RequestBuilder {
    let mut req = http
        .post(url)
        .bearer_auth(TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(id) = session {
        req = req.header("mcp-session-id", id);
    }
    req
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

pub(crate) fn run(
    rt: &tokio::runtime::Runtime,
    postern: &Path,
    dir: &Path,
    target: &str,
    n: usize,
    agents_at_once: usize,
) {
    let (below_dir, cap_dir) = (dir.join("below"), dir.join("cap"));
    std::fs::create_dir_all(&below_dir).unwrap();
    std::fs::create_dir_all(&cap_dir).unwrap();
    let below = Served::start(postern, &below_dir, target);
    let cap = Served::start(postern, &cap_dir, target);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    rt.block_on(async {
        // Warm both, then fill the second to its cap.
        for _ in 0..64 {
            let (id, _) = open(&http, &below.url).await;
            end(&http, &below.url, &id).await;
            open(&http, &cap.url).await;
        }
        let idle_rss = rss_kib(cap.child.id());
        let (mut under, mut at) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            for _ in 0..PER_ROUND {
                let (id, took) = open(&http, &below.url).await;
                under.push(took);
                end(&http, &below.url, &id).await;
            }
            for _ in 0..PER_ROUND {
                at.push(open(&http, &cap.url).await.1);
            }
        }
        let (under, at) = (median_ms(under), median_ms(at));
        println!("initialize p50, {} each, {ROUNDS} alternating rounds:", ROUNDS * PER_ROUND);
        println!("  below the cap {under:.3} ms, at the cap (evicting) {at:.3} ms: {:.2}x", at / under);
        let started = Instant::now();
        let (mut opened, mut gone) = (0, 0);
        // In quarters, with the RSS after each: bounded memory is a plateau, not a slope.
        for quarter in 1..=4 {
            let upto = n * quarter / 4;
            let mut agents = tokio::task::JoinSet::new();
            for agent in 0..agents_at_once {
                let (http, url) = (http.clone(), cap.url.clone());
                agents.spawn(async move {
                    let mut gone = 0;
                    for _ in (opened + agent..upto).step_by(agents_at_once) {
                        gone += usize::from(!try_open(&http, &url).await.2);
                    }
                    gone
                });
            }
            while let Some(done) = agents.join_next().await {
                gone += done.unwrap();
            }
            opened = upto;
            let rss = rss_kib(cap.child.id());
            println!(
                "  after {opened:>7} abandoned sessions: RSS {rss} KiB = {:.2}x idle",
                rss as f64 / idle_rss as f64
            );
        }
        let secs = started.elapsed().as_secs_f64();
        let after = rss_kib(cap.child.id());
        println!(
            "{n} sessions opened and abandoned by one actor ({agents_at_once} at once, {:.0}/s; {gone} evicted before their `initialized`): RSS {} KiB after, {} KiB idle (with 64 sessions): {:.2}x (goal: at most 1.5x)",
            n as f64 / secs,
            after,
            idle_rss,
            after as f64 / idle_rss as f64
        );
        // What the churn leaves once the stream state of the last minute is swept.
        tokio::time::sleep(SETTLE).await;
        let settled = rss_kib(cap.child.id());
        println!(
            "  {}s later, with no traffic: RSS {settled} KiB = {:.2}x idle",
            SETTLE.as_secs(),
            settled as f64 / idle_rss as f64
        );
    });
}

async fn end(http: &reqwest::Client, url: &str, id: &str) {
    let resp = http
        .delete(url)
        .bearer_auth(TOKEN)
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "DELETE: {}", resp.status());
}

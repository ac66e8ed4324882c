//! `--goals [--baseline-postern PATH] [--rounds N]`: issue 37's two figures for each build and
//! both protocol eras, alternated in one run so every build meets the same disk.
//!
//! Per round, protocol and build: a fresh gateway, the raw fsync rate probed before the c=1
//! calls, between them and the c=64 calls, and after; c=1 p50 through Postern minus the same
//! call made directly, set against the two-commit floor (2 ÷ the fsync rate around it); and the
//! c=64 durable rate against the fsync rate around it. The order of the builds flips every round.

use std::path::Path;

use postern_demo::target::InvoiceApiHandle;

use super::{fsync_rate, run, Budget, Served, SESSIONLESS, WITH_SESSION};

/// Goal: c=1 p50 added over direct is at most the two-commit floor plus this (ms).
const C1_OVER_FLOOR_MS: f64 = 0.5;
/// Goal: durable calls/s at c=64 at least this times the raw fsync rate.
const C64_OVER_FSYNC: f64 = 0.9;
/// Seconds of each fsync probe.
const PROBE_SECONDS: f64 = 1.0;

/// One measurement of one build.
struct Figures {
    /// c=1 p50 through Postern minus direct, minus the floor (ms).
    over_floor: f64,
    /// c=64 durable calls/s ÷ raw fsync rate.
    over_fsync: f64,
    c1_p50: f64,
    floor_ms: f64,
    c64_rate: f64,
}

pub struct Plan<'a> {
    pub builds: Vec<(&'static str, &'a Path)>,
    pub rounds: usize,
    pub calls1: usize,
    pub seconds: f64,
}

pub async fn compare(plan: &Plan<'_>, api: &InvoiceApiHandle, dir: &Path) {
    let target = api.url("");
    let direct = api.url("/invoices");
    println!(
        "goals: c=1 p50 added over direct ≤ two-commit floor + {C1_OVER_FLOOR_MS} ms; c=64 ≥ {C64_OVER_FSYNC}× raw fsync; {} calls at c=1, {} s at c=64, {} round(s)",
        plan.calls1, plan.seconds, plan.rounds
    );
    println!("round protocol   build     │ c=1 p50  floor  over floor │ c=64 calls/s  × fsync");
    let protocols = [WITH_SESSION, SESSIONLESS];
    let mut figures: Vec<(&str, &str, Figures)> = Vec::new();
    for round in 0..plan.rounds {
        for protocol in protocols {
            let mut order: Vec<_> = plan.builds.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for (name, postern) in order {
                let sub = dir.join(format!("goals-{round}-{protocol}-{name}"));
                std::fs::create_dir_all(&sub).unwrap();
                let f = measure(postern, &sub, &target, &direct, api, protocol, plan).await;
                println!(
                    "{round:>5} {protocol} {name:<9} │ {:>7.3} {:>6.3} {:>+10.3} │ {:>12.0} {:>6.2}",
                    f.c1_p50, f.floor_ms, f.over_floor, f.c64_rate, f.over_fsync
                );
                let _ = std::fs::remove_dir_all(&sub);
                figures.push((protocol, name, f));
            }
        }
    }
    verdicts(plan, &protocols, &figures);
}

async fn measure(
    postern: &Path,
    dir: &Path,
    target: &str,
    direct: &str,
    api: &InvoiceApiHandle,
    protocol: &'static str,
    plan: &Plan<'_>,
) -> Figures {
    let served = Served::start(postern, dir, target);
    let before = fsync_rate(dir, PROBE_SECONDS);
    let d = run(&api.state, None, direct, 1, Budget::Calls(plan.calls1), "d").await;
    let p = run(
        &api.state,
        Some(protocol),
        &served.url,
        1,
        Budget::Calls(plan.calls1),
        "p",
    )
    .await;
    let between = fsync_rate(dir, PROBE_SECONDS);
    let p64 = run(
        &api.state,
        Some(protocol),
        &served.url,
        64,
        Budget::Seconds(plan.seconds),
        "p",
    )
    .await;
    let after = fsync_rate(dir, PROBE_SECONDS);
    let floor_ms = 2.0 / ((before + between) / 2.0) * 1e3;
    let added = p.pct(0.5) - d.pct(0.5);
    Figures {
        over_floor: added - floor_ms,
        over_fsync: p64.rate / ((between + after) / 2.0),
        c1_p50: p.pct(0.5),
        floor_ms,
        c64_rate: p64.rate,
    }
}

/// The median of each build's rounds, with the goal's verdict.
fn verdicts(plan: &Plan<'_>, protocols: &[&str], figures: &[(&str, &str, Figures)]) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    for protocol in protocols {
        for (name, _) in &plan.builds {
            let mine = || {
                figures
                    .iter()
                    .filter(move |(p, n, _)| p == protocol && n == name)
                    .map(|(_, _, f)| f)
            };
            let over = median(mine().map(|f| f.over_floor).collect());
            let ratio = median(mine().map(|f| f.over_fsync).collect());
            println!(
                "{name}, protocol {protocol}: c=1 p50 added over the two-commit floor {over:+.3} ms (goal ≤ +{C1_OVER_FLOOR_MS} ms) — {}; c=64 {ratio:.2}× the raw fsync rate (goal ≥ {C64_OVER_FSYNC}×) — {}  [medians of {} rounds]",
                verdict(over <= C1_OVER_FLOOR_MS),
                verdict(ratio >= C64_OVER_FSYNC),
                plan.rounds
            );
        }
    }
}

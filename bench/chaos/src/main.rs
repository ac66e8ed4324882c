//! `postern-chaos`: a seeded, bounded, self-stopping chaos run (issue 19).
//!
//!     cargo build --release -p postern -p postern-chaos
//!     target/release/postern-chaos [--seed N] [--short] [--calls N] [--agents N] [--kills N]
//!         [--postern PATH]   (default: the `postern` beside this binary)
//!
//! Three `postern serve` replicas share a private PostgreSQL cluster behind a real HAProxy
//! (round-robin). Agents (32; 16 with `--short`) call through a fault proxy that cuts
//! connections at random byte offsets in either direction; the gateways reach the invoice API
//! through another. The target hangs after commit, answers 500 after commit, or answers
//! slowly; replicas are `kill -9`ed and restarted; PostgreSQL is restarted once; one replica is
//! paused (SIGSTOP) past its lease and resumed (it finds itself taken over and stops; it is
//! restarted). Then the faults stop, every unsettled intent is asked about again, and the
//! invariants are checked from the target's state and the ledger. The report fits a screen;
//! the exit status is 1 on any violation, and the seed (printed first) replays the schedule.

// A measuring tool, not library code: its scenario functions may run long.
#![allow(clippy::too_many_lines)]

mod agents;
mod cluster;
mod invariants;
mod proxy;
mod rng;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postern_demo::target::{InvoiceApi, Mode};
use postern_testkit::balancer::{Balance, Haproxy};
use postern_testkit::postgres::PrivatePostgres;

use agents::Agents;
use cluster::{Replica, LEASE, OPERATOR_TOKEN};
use proxy::FaultProxy;
use rng::Rng;

struct Plan {
    seed: u64,
    calls: u64,
    agents: u64,
    kills: u64,
    postern: PathBuf,
}

fn plan() -> Plan {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let short = args.iter().any(|a| a == "--short");
    let seed = arg("--seed").map_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        },
        |s| s.parse().expect("--seed N"),
    );
    let num = |name: &str, full: u64, short_value: u64| {
        arg(name).map_or(if short { short_value } else { full }, |v| {
            v.parse().unwrap_or_else(|_| panic!("{name} N"))
        })
    };
    // Beside this binary, as cargo builds them (`cargo build -p postern -p postern-chaos`).
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("postern")))
        .unwrap_or_else(|| PathBuf::from("postern"));
    Plan {
        seed,
        calls: num("--calls", 10_000, 1_000),
        agents: num("--agents", 32, 16),
        kills: num("--kills", 20, 3),
        postern: arg("--postern").map_or(beside, PathBuf::from),
    }
}

/// What the fault schedule did.
#[derive(Default)]
struct Done {
    kills: u64,
    pauses: u64,
    taken_over_exits: u64,
    pg_restarts: u64,
    target_faults: u64,
}

fn main() {
    let plan = plan();
    println!(
        "postern chaos run — seed {} (replay: --seed {})",
        plan.seed, plan.seed
    );
    assert!(
        plan.postern.exists(),
        "{} not found: build it first (or --postern PATH)",
        plan.postern.display()
    );
    postern_channels::http::install_default_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let code = rt.block_on(run(plan));
    std::process::exit(code);
}

async fn run(plan: Plan) -> i32 {
    let rng = Rng::new(plan.seed);
    let pg = PrivatePostgres::start();
    let store = pg.url();
    let target = InvoiceApi::start().await.expect("the invoice API");
    let to_target = FaultProxy::start(target.addr, rng.fork(1), 20).await;
    let work = std::env::temp_dir().join(format!("postern-chaos-{}", plan.seed));
    let _ = std::fs::remove_dir_all(&work);
    let limits = cluster::Limits::for_calls(plan.calls);
    let text = cluster::config(&store, &to_target.addr.to_string(), limits);
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| Replica::new(work.join(format!("replica-{i}")), &text))
        .collect();
    tokio::task::block_in_place(|| {
        for r in &mut replicas {
            r.start(&plan.postern);
        }
    });
    let addrs: Vec<String> = replicas.iter().map(Replica::addr).collect();
    let lb = Haproxy::start(
        &addrs.iter().map(String::as_str).collect::<Vec<_>>(),
        Balance::RoundRobin,
    );
    let to_lb = FaultProxy::start(lb.addr, rng.fork(2), 20).await;
    let agents = Arc::new(Agents {
        url: format!("http://{}/mcp", to_lb.addr),
        tally: Arc::default(),
    });

    println!(
        "{} agents, {} calls, {} kills; 3 replicas on PostgreSQL :{} behind HAProxy; lease {} s",
        plan.agents,
        plan.calls,
        plan.kills,
        store
            .rsplit(':')
            .next()
            .unwrap_or("?")
            .split('/')
            .next()
            .unwrap_or("?"),
        LEASE.as_secs()
    );
    let started = Instant::now();
    let workers: Vec<_> = (0..plan.agents)
        .map(|n| tokio::spawn(agents.clone().run(n, rng.fork(100 + n), plan.calls)))
        .collect();
    let done = schedule(&plan, &rng, &agents, &mut replicas, &pg, &target.state).await;
    for w in workers {
        let _ = w.await;
    }
    let elapsed = started.elapsed();
    let made = agents.tally.calls.load(Ordering::Relaxed);

    // The faults stop; every replica is up; the takeover scan has had its time; then every
    // unsettled intent is asked about again.
    to_lb.calm();
    to_target.calm();
    target.state.set_mode(Mode::Normal);
    tokio::task::block_in_place(|| {
        for r in &mut replicas {
            if !r.is_running() {
                r.start(&plan.postern);
            }
        }
    });
    tokio::time::sleep(LEASE * 2).await;
    let reopened = agents.clone().recover(rng.fork(3)).await;

    let record = invariants::read(&store).await;
    let public = work.join("signing.pub");
    let key = postern_audit::SigningKey::from_hex(cluster::SIGNING_KEY).expect("the signing key");
    std::fs::write(&public, key.verifying_key().to_string()).expect("the public key file");
    let audit = invariants::audit(&plan.postern, &store, &public);
    let operator_unknowns = operator_view(&replicas[0].addr()).await;
    let intents = agents.tally.intents.lock().unwrap().clone();
    let invoices = target.state.invoices();
    let mut checks = invariants::check(&intents, &invoices, &record, audit, operator_unknowns);
    checks.push(invariants::budgets(&invoices, &record, limits));
    tokio::task::block_in_place(|| {
        for r in &mut replicas {
            r.stop();
        }
    });

    report(
        &plan,
        &agents,
        &done,
        &record,
        made,
        elapsed,
        reopened,
        (
            to_lb.cuts.load(Ordering::Relaxed),
            to_target.cuts.load(Ordering::Relaxed),
        ),
    );
    let mut failed = false;
    for c in &checks {
        let ok = c.violations.is_empty();
        failed |= !ok;
        println!(
            "  {} {:<64} over {}",
            if ok { "ok  " } else { "FAIL" },
            c.name,
            c.over
        );
        for v in c.violations.iter().take(5) {
            println!("         {v}");
        }
        if c.violations.len() > 5 {
            println!("         … and {} more", c.violations.len() - 5);
        }
    }
    drop(lb);
    if failed {
        println!(
            "VIOLATED — replay with --seed {}; the replicas' logs are in {}",
            plan.seed,
            work.display()
        );
        1
    } else {
        let _ = std::fs::remove_dir_all(&work);
        println!("all invariants hold (seed {})", plan.seed);
        0
    }
}

/// Executions waiting unknown or under review, as the operators' status shows them.
async fn operator_view(addr: &str) -> Option<u64> {
    let v: serde_json::Value = reqwest::Client::new()
        .get(format!("http://{addr}/ops/status"))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let unknown = v["outcome_unknown"].as_u64()?;
    let reviews = v["reviews_pending"].as_u64()?;
    Some(unknown + reviews)
}

/// The faults, spread over the run by its progress: kills and restarts, one pause past the
/// lease, one database restart, and the target's misbehaviour all along.
async fn schedule(
    plan: &Plan,
    rng: &Rng,
    agents: &Agents,
    replicas: &mut [Replica],
    pg: &PrivatePostgres,
    target: &InvoiceApi,
) -> Done {
    let mut r = rng.fork(4);
    let mut done = Done::default();
    let progress = || agents.tally.calls.load(Ordering::Relaxed) as f64 / plan.calls as f64;
    let kill_at: Vec<f64> = (1..=plan.kills)
        .map(|k| k as f64 / (plan.kills + 2) as f64)
        .collect();
    let (pause_at, pg_at) = (
        0.3 + r.below(100) as f64 / 1000.0,
        0.55 + r.below(100) as f64 / 1000.0,
    );
    let mut next_kill = 0;
    let (mut paused, mut restarted_pg) = (false, false);
    while progress() < 1.0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The target misbehaves now and then (each mode applies to its next request).
        let mode = match r.below(10) {
            0 => Some(Mode::HangOnce),
            1 => Some(Mode::Fail500AfterCreateOnce),
            2 => Some(Mode::SlowOnce(Duration::from_millis(200 + r.below(1500)))),
            _ => None,
        };
        if let Some(m) = mode {
            target.set_mode(m);
            done.target_faults += 1;
        }
        // A replica that stopped by itself (taken over after a pause) is restarted.
        for rep in replicas.iter_mut() {
            if let Some(code) = rep.exited() {
                if code == 75 {
                    done.taken_over_exits += 1;
                }
                tokio::task::block_in_place(|| rep.start(&plan.postern));
            }
        }
        if next_kill < kill_at.len() && progress() >= kill_at[next_kill] {
            next_kill += 1;
            let i = r.below(replicas.len() as u64) as usize;
            replicas[i].kill9();
            done.kills += 1;
            tokio::time::sleep(Duration::from_millis(100 + r.below(700))).await;
            tokio::task::block_in_place(|| replicas[i].start(&plan.postern));
        }
        if !paused && progress() >= pause_at {
            paused = true;
            let i = r.below(replicas.len() as u64) as usize;
            replicas[i].signal("STOP");
            tokio::time::sleep(LEASE + Duration::from_millis(1500)).await;
            replicas[i].signal("CONT");
            done.pauses += 1;
        }
        if !restarted_pg && progress() >= pg_at {
            restarted_pg = true;
            tokio::task::block_in_place(|| pg.pg_ctl("restart"));
            done.pg_restarts += 1;
        }
    }
    done
}

#[allow(clippy::too_many_arguments)]
fn report(
    plan: &Plan,
    agents: &Agents,
    done: &Done,
    record: &invariants::Record,
    made: u64,
    elapsed: Duration,
    reopened: usize,
    cuts: (u64, u64),
) {
    let t = &agents.tally;
    let mut lat = t.latencies.lock().unwrap().clone();
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p) as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let intents = t.intents.lock().unwrap();
    let settled = intents.iter().filter(|i| i.settled()).count();
    let mut states: std::collections::BTreeMap<String, usize> = Default::default();
    for s in record.states.values() {
        *states
            .entry(s.split('(').next().unwrap_or(s).to_string())
            .or_default() += 1;
    }
    let takeovers = record.unknowns.values().filter(|(_, taken)| *taken).count();
    let resolved = record
        .unknowns
        .keys()
        .filter(|id| {
            record
                .states
                .get(*id)
                .is_some_and(|s| s != "outcome_unknown" && s != "needs_review")
        })
        .count();
    println!("\n── chaos report (seed {}) ──", plan.seed);
    println!(
        "calls      {made} in {:.1} s under chaos: {:.0} calls/s; answered {} (p50 {:.1} ms, p99 {:.1} ms), transport errors {}, refusals {}",
        elapsed.as_secs_f64(),
        made as f64 / elapsed.as_secs_f64(),
        t.answered.load(Ordering::Relaxed),
        pct(0.5),
        pct(0.99),
        t.transport_errors.load(Ordering::Relaxed),
        t.refusals.load(Ordering::Relaxed)
    );
    println!(
        "intents    {} ({} settled; {} asked again after the faults stopped)",
        intents.len(),
        settled,
        reopened
    );
    println!(
        "faults     {} kill -9 + restart, {} pause past the lease ({} replica(s) stopped themselves, taken over), {} PostgreSQL restart, {} target faults, {} + {} connections cut",
        done.kills, done.pauses, done.taken_over_exits, done.pg_restarts, done.target_faults, cuts.0, cuts.1
    );
    println!(
        "record     {} executions {:?}; {} became outcome_unknown ({} taken over from a stopped replica), {} of them since resolved",
        record.states.len(),
        states,
        record.unknowns.len(),
        takeovers,
        resolved
    );
    println!("invariants");
}

//! The retention soak (issue 12): steady load through a gateway whose records are kept for
//! one minute, sampling the store's size on disk and the gateway's resident memory. With
//! retention pruning, both must stay flat (within ±10 %) once the first records have aged out:
//! the late samples are compared with the early steady ones, measured in the same run.
//!
//!     cargo build --release -p postern && cargo run --release -p postern-gateway-load -- \
//!         --soak 30 [--concurrency 8] [--rate CALLS_PER_SECOND]
//!
//! With `--rate`, the workers together offer at most that many calls per second (a slot missed
//! while the gateway was slow is skipped, not made up in a burst), so the store's working set
//! does not follow the machine's other load; a rate the gateway cannot keep up with is reported.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Client, Served, WITH_SESSION};

/// Every sample: minutes since the start, calls so far, store bytes, gateway RSS bytes.
struct Sample {
    minutes: f64,
    calls: usize,
    store: u64,
    rss: u64,
}

/// The SQLite ledger's bytes on disk: the database, its WAL and shared-memory index.
fn store_bytes(dir: &Path) -> u64 {
    ["ledger.db", "ledger.db-wal", "ledger.db-shm"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// A process's resident set size, from `/proc/PID/status`.
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn mean(samples: &[&Sample], f: impl Fn(&Sample) -> u64) -> f64 {
    samples.iter().map(|s| f(s) as f64).sum::<f64>() / samples.len().max(1) as f64
}

/// Runs the soak for `minutes` at `concurrency` (offering `rate` calls/s in all, if given)
/// and prints the samples and the verdict.
pub fn run(
    rt: &tokio::runtime::Runtime,
    served: &Served,
    dir: &Path,
    minutes: f64,
    concurrency: usize,
    rate: Option<f64>,
) {
    let pid = served.child.id();
    let calls = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let missed = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let (calls, stop, url) = (calls.clone(), stop.clone(), served.url.clone());
            let missed = missed.clone();
            rt.spawn(async move {
                let mut client = Client::connect(Some(WITH_SESSION), &url).await;
                // Each worker's share of the offered rate: a call every `every`, on a fixed
                // schedule. A slot missed while the gateway was slow is skipped, never made up
                // in a burst: the offered rate is a ceiling, so the store's working set is the
                // rate's, not a catch-up's (counted in `missed`).
                let every = rate.map(|r| Duration::from_secs_f64(concurrency as f64 / r));
                let start = tokio::time::Instant::now();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(every) = every {
                        let due = start + every * i as u32;
                        let now = tokio::time::Instant::now();
                        if now > due + every {
                            let behind = ((now - due).as_secs_f64() / every.as_secs_f64()) as u64;
                            missed.fetch_add(behind as usize, Ordering::Relaxed);
                            i += behind;
                        }
                        tokio::time::sleep_until(start + every * i as u32).await;
                    }
                    i += 1;
                    client.call(&format!("soak-w{w}-{i}"), i).await;
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let offered = rate.map_or("as fast as it answers".to_string(), |r| {
        format!("{r} calls/s offered")
    });
    println!("retention soak — {minutes} min at concurrency {concurrency}, {offered}, [gateway] retention = \"1m\"; a sample every 30 s");
    println!("minute    calls   calls/s   store MiB   RSS MiB");
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut last_calls = 0;
    while started.elapsed().as_secs_f64() < minutes * 60.0 {
        std::thread::sleep(Duration::from_secs(30));
        let s = Sample {
            minutes: started.elapsed().as_secs_f64() / 60.0,
            calls: calls.load(Ordering::Relaxed),
            store: store_bytes(dir),
            rss: rss_bytes(pid),
        };
        println!(
            "{:>6.1} {:>8} {:>9.0} {:>11.2} {:>9.2}",
            s.minutes,
            s.calls,
            (s.calls - last_calls) as f64 / 30.0,
            s.store as f64 / 1048576.0,
            s.rss as f64 / 1048576.0
        );
        last_calls = s.calls;
        samples.push(s);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = rt.block_on(w);
    }
    // Baseline: the samples of the run's second fifth (records have been aging out for a
    // while); compared with the last fifth.
    let n = samples.len();
    let early: Vec<&Sample> = samples[n / 5..(2 * n / 5).max(n / 5 + 1)].iter().collect();
    let late: Vec<&Sample> = samples[(4 * n / 5).min(n - 1)..].iter().collect();
    let verdict = |ratio: f64| {
        if (0.9..=1.1).contains(&ratio) {
            "met"
        } else {
            "NOT met"
        }
    };
    let store = mean(&late, |s| s.store) / mean(&early, |s| s.store);
    let rss = mean(&late, |s| s.rss) / mean(&early, |s| s.rss);
    println!(
        "store size, last fifth vs second fifth of the run: {store:.3}× (goal: within ±10 %) — {}",
        verdict(store)
    );
    println!(
        "gateway RSS, last fifth vs second fifth of the run: {rss:.3}× (goal: within ±10 %) — {}",
        verdict(rss)
    );
    let done = calls.load(Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{done} calls in {:.1} min, each a new durable execution",
        seconds / 60.0
    );
    if let Some(r) = rate {
        let kept_up = done as f64 / seconds / r;
        println!(
            "the gateway answered {:.1} % of the offered rate ({} slots skipped while it was slow){}",
            kept_up * 100.0,
            missed.load(Ordering::Relaxed),
            if kept_up < 0.95 {
                " — it could not keep up: the load was not the one asked for"
            } else {
                ""
            }
        );
    }
}

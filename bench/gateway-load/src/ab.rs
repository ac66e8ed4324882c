//! An A/B of two configurations of the same build in one run (`--identity`, `--budget`): an A
//! and a B per round, a fresh gateway for each measurement, c=1 p50 over `calls` calls and c=64
//! calls/s for `seconds`, printed with their means and ratios.

use std::path::Path;

use postern_demo::target::InvoiceApiHandle;

use super::{run_as, Budget, Served, WITH_SESSION};

/// One side of the A/B: its configuration and how a call authenticates to a served gateway.
pub struct Side<'a> {
    pub config: String,
    pub bearer: &'a dyn Fn(&Served) -> String,
}

pub struct Measure<'a> {
    pub postern: &'a Path,
    pub dir: &'a Path,
    pub seconds: f64,
    pub calls: usize,
    pub rounds: usize,
}

/// Runs the rounds; the rows (side, c=1 p50 ms, c=64 calls/s) and the means printed.
pub async fn compare(api: &InvoiceApiHandle, m: &Measure<'_>, tag: &str, sides: [&Side<'_>; 2]) {
    let mut rows: Vec<(&str, f64, f64)> = Vec::new();
    for round in 0..m.rounds {
        for (name, side) in ["A", "B"].into_iter().zip(sides) {
            let mut measured = [0.0; 2];
            for (slot, (concurrency, budget)) in [
                (1, Budget::Calls(m.calls)),
                (64, Budget::Seconds(m.seconds)),
            ]
            .into_iter()
            .enumerate()
            {
                let sub = m.dir.join(format!("{tag}-{name}-{round}-c{concurrency}"));
                std::fs::create_dir_all(&sub).unwrap();
                let served = Served::start_with(m.postern, &sub, side.config.clone(), &[]);
                let bearer = (side.bearer)(&served);
                let route = format!("{tag}{name}{concurrency}");
                let run = run_as(
                    &api.state,
                    Some(WITH_SESSION),
                    &served.url,
                    concurrency,
                    budget,
                    &route,
                    &bearer,
                )
                .await;
                measured[slot] = match concurrency {
                    1 => run.pct(0.5),
                    _ => run.rate,
                };
            }
            println!(
                "  round {round} {name}: c=1 p50 {:.3} ms, c=64 {:.0} calls/s",
                measured[0], measured[1]
            );
            rows.push((name, measured[0], measured[1]));
        }
    }
    let mean = |who: &str, f: fn(&(&str, f64, f64)) -> f64| super::mean_of(&rows, who, f);
    let (a1, b1) = (mean("A", |r| r.1), mean("B", |r| r.1));
    let (a64, b64) = (mean("A", |r| r.2), mean("B", |r| r.2));
    println!(
        "  c=64 calls/s: A {a64:.0}, B {b64:.0}; A/B {:.3} (goal: B costs at most 10 % more, A/B ≤ 1.10)",
        a64 / b64
    );
    println!("  c=1 p50: A {a1:.3} ms, B {b1:.3} ms; B/A {:.3}", b1 / a1);
}

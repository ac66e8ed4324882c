//! `--identity [--rounds N]` (issue 50): what an `[[issuer]]`'s JWT access token costs beside a
//! static token, on the same build in the same run.
//!
//! A: the actor authenticates with its static token. B: the same actor, matched by its claims,
//! authenticates with an ES256 JWT signed by an issuer in this process (`testkit::issuer`:
//! discovery and key set over HTTP on loopback), verified by the gateway against the key set
//! it fetched. A B per round, a fresh gateway for each measurement; c=64 calls/s for the given
//! seconds and c=1 p50, printed as B/A. Issue 50's goal: B costs at most 10 % more at c=64.

use std::path::Path;

use postern_demo::target::InvoiceApi;
use postern_testkit::issuer::TestIssuer;
use serde_json::json;

use super::{config, run_as, Budget, Served, TOKEN, WITH_SESSION};

pub async fn compare(postern: &Path, dir: &Path, seconds: f64, calls: usize, rounds: usize) {
    let api = InvoiceApi::start().await.unwrap();
    let target = format!("http://{}", api.addr);
    let issuer = TestIssuer::start().await;
    let text = format!(
        "{}\n[[issuer]]\nurl = \"{}\"\n\n[[actor]]\nname = \"agent\"\nclaims = {{ issuer = \"{}\", subject = \"bench-agent\" }}\n",
        config(&target, "10m", None),
        issuer.url,
        issuer.url
    );
    println!("identity: A a static token, B an [[issuer]]'s ES256 JWT (verified against its key set); A B per round");
    let mut rows: Vec<(&str, f64, f64)> = Vec::new();
    for round in 0..rounds {
        for name in ["A", "B"] {
            let mut measured = [0.0; 2];
            for (slot, (concurrency, budget)) in
                [(1, Budget::Calls(calls)), (64, Budget::Seconds(seconds))]
                    .into_iter()
                    .enumerate()
            {
                let sub = dir.join(format!("id-{name}-{round}-c{concurrency}"));
                std::fs::create_dir_all(&sub).unwrap();
                let served = Served::start_with(postern, &sub, text.clone(), &[]);
                let bearer = match name {
                    "A" => TOKEN.to_string(),
                    _ => issuer.token(json!({
                        "sub": "bench-agent", "aud": served.url,
                        "exp": now() + 3600,
                    })),
                };
                let route = format!("id{name}{concurrency}");
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

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

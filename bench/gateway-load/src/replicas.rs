//! `--replicas [--pg URL] [--rounds N]`: durable calls per second at concurrency 64 through one
//! replica on SQLite (the baseline), one replica on PostgreSQL, and two replicas on the same
//! PostgreSQL behind a real HAProxy (round-robin), sessionless protocol (no session to carry
//! between replicas). Each configuration gets a new database. Issue 19's figure is the
//! two-replica rate over the one-replica rate on PostgreSQL.

use std::path::Path;
use std::process::Command;

use postern_demo::target::InvoiceApi;
use postern_testkit::balancer::{Balance, Haproxy};

use super::{config, run, Budget, Served, SESSIONLESS};

/// A new database on the PostgreSQL at `pg` (an admin URL without a database); its URL.
fn fresh_database(pg: &str, tag: &str) -> String {
    let name = format!("postern_replicas_{tag}_{}", std::process::id());
    let ok = Command::new("psql")
        .args([&format!("{pg}/postgres"), "-q", "-c"])
        .arg(format!("DROP DATABASE IF EXISTS {name}"))
        .args(["-c", &format!("CREATE DATABASE {name}")])
        .status()
        .expect("psql");
    assert!(ok.success(), "creating {name} on {pg}");
    format!("{pg}/{name}")
}

pub async fn compare(postern: &Path, dir: &Path, seconds: f64, pg: &str, rounds: usize) {
    let api = InvoiceApi::start().await.unwrap();
    let target = format!("http://{}", api.addr);
    println!("replicas: durable calls/s at c=64, sessionless, {seconds} s per measurement; SQLite 1 replica, PostgreSQL 1 replica, PostgreSQL 2 replicas behind HAProxy (round-robin)");
    let mut rows = Vec::new();
    for round in 0..rounds {
        let sub = |name: &str| {
            let d = dir.join(format!("replicas-{round}-{name}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let sqlite = {
            let g = Served::start(postern, &sub("sqlite"), &target);
            run(
                &api.state,
                Some(SESSIONLESS),
                &g.url,
                64,
                Budget::Seconds(seconds),
                "sqlite",
            )
            .await
            .rate
        };
        let on_pg = |tag: &str| {
            let store = fresh_database(pg, &format!("{tag}{round}"));
            config(&target, "10m", None).replace("sqlite://ledger.db", &store)
        };
        let one = {
            let g = Served::start_with(postern, &sub("pg1"), on_pg("one"), &[]);
            run(
                &api.state,
                Some(SESSIONLESS),
                &g.url,
                64,
                Budget::Seconds(seconds),
                "pg1",
            )
            .await
            .rate
        };
        let two = {
            let text = on_pg("two");
            let a = Served::start_with(postern, &sub("pg2a"), text.clone(), &[]);
            let b = Served::start_with(postern, &sub("pg2b"), text, &[]);
            let addr = |s: &Served| {
                s.url
                    .trim_start_matches("http://")
                    .trim_end_matches("/mcp")
                    .to_string()
            };
            let lb = Haproxy::start(&[&addr(&a), &addr(&b)], Balance::RoundRobin);
            let url = format!("http://{}/mcp", lb.addr);
            run(
                &api.state,
                Some(SESSIONLESS),
                &url,
                64,
                Budget::Seconds(seconds),
                "pg2",
            )
            .await
            .rate
        };
        println!("  round {round}: SQLite ×1 {sqlite:.0}/s, PostgreSQL ×1 {one:.0}/s, PostgreSQL ×2 {two:.0}/s");
        rows.push((sqlite, one, two));
    }
    let mean = |f: fn(&(f64, f64, f64)) -> f64| rows.iter().map(f).sum::<f64>() / rows.len() as f64;
    let (sqlite, one, two) = (mean(|r| r.0), mean(|r| r.1), mean(|r| r.2));
    println!(
        "  mean: SQLite ×1 {sqlite:.0}/s, PostgreSQL ×1 {one:.0}/s ({:.2} of SQLite), PostgreSQL ×2 {two:.0}/s: ×2/×1 = {:.2} (goal ≥ 1.6)",
        one / sqlite,
        two / one
    );
}

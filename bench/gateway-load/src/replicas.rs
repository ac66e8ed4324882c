//! `--replicas [--pg URL] [--rounds N]`: durable calls per second at concurrency 64 through one
//! replica on SQLite (the baseline), one replica on PostgreSQL, and two and three replicas on
//! the same PostgreSQL behind a real HAProxy (round-robin), sessionless protocol (no session to
//! carry between replicas). Each configuration gets a new database, dropped after its
//! measurement. Issue 37's goals: one PostgreSQL replica at ≥ 0.8 of SQLite, two at ≥ 1.8 of
//! one, three at ≥ 2.5 of one.

use std::path::Path;

use postern_demo::target::InvoiceApi;
use postern_testkit::balancer::{Balance, Haproxy};
use postern_testkit::postgres::FreshDatabase;

use super::{config, run, Budget, Served, SESSIONLESS};

/// Durable calls/s through `n` replicas on one PostgreSQL database behind HAProxy.
async fn balanced(
    postern: &Path,
    api: &InvoiceApi,
    config_text: String,
    n: usize,
    sub: &dyn Fn(&str) -> std::path::PathBuf,
    seconds: f64,
) -> f64 {
    let replicas: Vec<Served> = (0..n)
        .map(|i| {
            Served::start_with(
                postern,
                &sub(&format!("pg{n}-{i}")),
                config_text.clone(),
                &[],
            )
        })
        .collect();
    let addrs: Vec<String> = replicas
        .iter()
        .map(|s| {
            s.url
                .trim_start_matches("http://")
                .trim_end_matches("/mcp")
                .to_string()
        })
        .collect();
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let lb = Haproxy::start(&addrs, Balance::RoundRobin);
    let url = format!("http://{}/mcp", lb.addr);
    run(
        api,
        Some(SESSIONLESS),
        &url,
        64,
        Budget::Seconds(seconds),
        &format!("pg{n}"),
    )
    .await
    .rate
}

/// A database of its own for one measurement, dropped when the measurement is over.
fn fresh(pg: &str) -> FreshDatabase {
    FreshDatabase::create(&format!("{pg}/postgres"), "postern_replicas")
}

pub async fn compare(postern: &Path, dir: &Path, seconds: f64, pg: &str, rounds: usize) {
    let api = InvoiceApi::start().await.unwrap();
    let target = format!("http://{}", api.addr);
    println!("replicas: durable calls/s at c=64, sessionless, {seconds} s per measurement; SQLite 1 replica, PostgreSQL 1 replica, PostgreSQL 2 and 3 replicas behind HAProxy (round-robin)");
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
        let on_pg = |db: &FreshDatabase| {
            config(&target, "10m", None).replace("sqlite://ledger.db", &db.url())
        };
        let one = {
            let db = fresh(pg);
            let g = Served::start_with(postern, &sub("pg1"), on_pg(&db), &[]);
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
            let db = fresh(pg);
            balanced(postern, &api.state, on_pg(&db), 2, &sub, seconds).await
        };
        let three = {
            let db = fresh(pg);
            balanced(postern, &api.state, on_pg(&db), 3, &sub, seconds).await
        };
        println!("  round {round}: SQLite ×1 {sqlite:.0}/s, PostgreSQL ×1 {one:.0}/s, ×2 {two:.0}/s, ×3 {three:.0}/s");
        rows.push([sqlite, one, two, three]);
    }
    let mean = |i: usize| rows.iter().map(|r| r[i]).sum::<f64>() / rows.len() as f64;
    let (sqlite, one, two, three) = (mean(0), mean(1), mean(2), mean(3));
    println!(
        "  mean: SQLite ×1 {sqlite:.0}/s, PostgreSQL ×1 {one:.0}/s ({:.2} of SQLite, goal ≥ 0.8), ×2 {two:.0}/s: ×2/×1 = {:.2} (goal ≥ 1.8), ×3 {three:.0}/s: ×3/×1 = {:.2} (goal ≥ 2.5)",
        one / sqlite,
        two / one,
        three / one
    );
}

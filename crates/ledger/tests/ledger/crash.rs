//! Real OS processes: two writers on one SQLite file, and `kill -9` at random points.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use postern_core::lifecycle::{State, Verdict};
use postern_ledger::{Ledger, LedgerOptions, ListFilter};

use crate::support::{fresh_store, verify, Backend, SIGNING_HEX};

const DRIVER: &str = env!("CARGO_BIN_EXE_postern-ledger-driver");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_accepting_the_same_request_on_one_sqlite_file_make_one_execution() {
    let (url, _guard) = fresh_store(Backend::Sqlite).await;
    // Create the schema first so both processes race on accepts, not on migrations.
    Ledger::open(&url, LedgerOptions::default())
        .await
        .unwrap()
        .0
        .close()
        .await;
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(DRIVER)
                .args(["accept", &url, "25"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = HashSet::new();
    let mut answers = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            ids.insert(line.to_string());
            answers += 1;
        }
    }
    assert_eq!(answers, 50);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let (ledger, _) = Ledger::open(&url, LedgerOptions::default()).await.unwrap();
    let all = ledger
        .read()
        .list(&ListFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
}

/// A tiny deterministic generator: the kill points vary, and a failure can be replayed.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_minus_nine_at_random_points_never_loses_or_corrupts_an_execution() {
    let (url, _guard) = fresh_store(Backend::Sqlite).await;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("kill schedule seed: {seed}");
    let mut rng = Lcg(seed);
    let mut dispatched = HashSet::new();
    let mut recovered_unknown = 0;
    const KILLS: usize = 50;
    for round in 0..KILLS {
        let mut child = Command::new(DRIVER)
            .args(["churn", &url, SIGNING_HEX])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // Let it get going, then kill it wherever it happens to be.
        let lines = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
        });
        let started = Instant::now();
        let delay = Duration::from_millis(20 + rng.below(120));
        while started.elapsed() < delay {
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        for line in lines.join().unwrap() {
            if let Some(id) = line.strip_prefix("dispatched ") {
                dispatched.insert(id.to_string());
            }
        }

        let (ledger, report) = Ledger::open(&url, LedgerOptions::default()).await.unwrap();
        recovered_unknown += report.marked_unknown.len();
        let audit = verify(&ledger).await;
        assert!(audit.is_valid(), "round {round} (seed {seed}): {audit}");
        let all = ledger
            .read()
            .list(&ListFilter {
                limit: 100_000,
                ..Default::default()
            })
            .await
            .unwrap();
        for e in &all {
            assert!(
                matches!(
                    e.lifecycle.state,
                    State::Completed(Verdict::Applied)
                        | State::Delivered(Verdict::Applied)
                        | State::OutcomeUnknown
                ),
                "round {round} (seed {seed}): {} left in {}",
                e.id,
                e.lifecycle.state
            );
        }
        let known: HashSet<String> = all.iter().map(|e| e.id.to_string()).collect();
        for id in &dispatched {
            assert!(
                known.contains(id),
                "round {round}: {id} was reported dispatched but is not in the ledger"
            );
        }
        ledger.close().await;
    }
    println!("{} executions dispatched, {recovered_unknown} recovered as outcome_unknown after {KILLS} kills", dispatched.len());
    assert!(
        dispatched.len() >= KILLS,
        "the driver must make progress between kills"
    );
}

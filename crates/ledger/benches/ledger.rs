//! The ledger benchmark: durable executions per second on a real ledger file, beside the raw
//! fsync rate of the same disk measured in the same run, and audit verification throughput.
//!
//!     cargo bench -p postern-ledger --bench ledger -- [--keep DIR] [--seconds N] [--concurrency 1,16,64]
//!     cargo bench -p postern-ledger --bench ledger -- --verify-file DIR/audit-export.jsonl
//!
//! One execution = accept (+ authorized + dispatched, one commit) → completed with a result
//! (a second commit): every step durable before the next. Figures are printed as ratios to
//! the floor measured here, never as absolute promises.
//!
//! After the concurrency-1 run it also measures SQLite alone (`bare.rs`): the same two commits
//! with rows of the same sizes, written straight through rusqlite into the ledger's schema, and
//! SQLite's cheapest commit. That splits the gap to the floor into what the storage engine
//! costs on this disk and what the ledger adds.

mod bare;

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postern_audit::{verify_export, ExportLine, SigningKey};
use postern_core::config::Config;
use postern_core::lifecycle::Verdict;
use postern_core::{ActionRecord, Arguments, EventKind, FingerprintKey, Timestamp};
use postern_ledger::{AcceptRequest, Ledger, LedgerOptions, NewEvent, ResultBody};

const CONFIG: &str = r#"
[gateway]
fingerprint_key = { env = "UNUSED" }
[[tool]]
name = "create_invoice"
class = "idempotent_write"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/invoices" }
"#;

fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    )
}

/// The ledger's own baseline probe (512 B appends, each `fdatasync`ed) for `duration`:
/// appends per second.
fn fsync_rate(dir: &Path, duration: Duration) -> f64 {
    postern_ledger::disk::fsync_rate(dir, duration)
        .expect("the fsync probe could not write in the benchmark directory")
}

/// Slices each concurrency level is measured in, alternating with the fsync probe.
const ROUNDS: usize = 8;

/// A real ledger file driven by `concurrency` workers, kept open between the benchmark's
/// slices so the fsync probe can be interleaved with it.
struct LedgerWorkload {
    ledger: Arc<Ledger>,
    path: PathBuf,
    contract: Arc<postern_core::ToolContract>,
    fkey: Arc<FingerprintKey>,
    /// Makes every request's arguments distinct (an identical one would be matched, not run).
    next: Arc<AtomicU64>,
}

impl LedgerWorkload {
    async fn open(dir: &Path, concurrency: usize, key: Arc<SigningKey>) -> LedgerWorkload {
        let path = dir.join(format!("ledger-c{concurrency}.db"));
        let _ = std::fs::remove_file(&path);
        let url = format!("sqlite://{}", path.display());
        let options = LedgerOptions {
            signing_key: Some(key),
            ..LedgerOptions::default()
        };
        let (ledger, _) = Ledger::open(&url, options).await.unwrap();
        let contract = Arc::new(
            Config::parse(CONFIG, "bench.toml")
                .unwrap()
                .tool("create_invoice")
                .unwrap()
                .clone(),
        );
        LedgerWorkload {
            ledger: Arc::new(ledger),
            path,
            contract,
            fkey: Arc::new(FingerprintKey::new(&[42u8; 32]).unwrap()),
            next: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Runs `concurrency` workers for `duration`; returns how many executions completed.
    async fn run(&self, concurrency: usize, duration: Duration) -> u64 {
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let (ledger, contract, fkey, next, done, stop) = (
                    self.ledger.clone(),
                    self.contract.clone(),
                    self.fkey.clone(),
                    self.next.clone(),
                    done.clone(),
                    stop.clone(),
                );
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let args =
                            Arguments::parse(&format!(r#"{{"customer":"c{i}","amount":{i}}}"#))
                                .unwrap();
                        let record =
                            ActionRecord::build(&contract, "bench", None, &args, &fkey).unwrap();
                        let req = AcceptRequest::new(record, &fkey, contract.clone(), now())
                            .unwrap()
                            .then(vec![
                                NewEvent::new(EventKind::Authorized),
                                NewEvent::new(EventKind::Dispatched),
                            ]);
                        let id = ledger.accept(req).await.unwrap().execution().id;
                        let result = ResultBody {
                            body: br#"{"id":"inv_1","status":"open"}"#.to_vec(),
                            size: 30,
                            truncated: false,
                        };
                        ledger
                            .append(
                                id,
                                NewEvent::new(EventKind::Completed(Verdict::Applied))
                                    .with_result(result),
                                now(),
                            )
                            .await
                            .unwrap();
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        tokio::time::sleep(duration).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        done.load(Ordering::Relaxed)
    }

    /// Signs a last checkpoint and returns the file (the ledger stays as written).
    async fn finish(self) -> PathBuf {
        self.ledger.checkpoint(now()).await.unwrap();
        self.path
    }
}

/// Rates accumulated over interleaved slices.
#[derive(Default)]
struct Tally {
    count: f64,
    seconds: f64,
}

impl Tally {
    fn add(&mut self, count: u64, started: Instant) {
        self.count += count as f64;
        self.seconds += started.elapsed().as_secs_f64();
    }

    /// A slice measured by a probe that reports its own rate over `duration`.
    fn add_rate(&mut self, rate: f64, duration: Duration) {
        self.count += rate * duration.as_secs_f64();
        self.seconds += duration.as_secs_f64();
    }

    fn rate(&self) -> f64 {
        self.count / self.seconds
    }
}

/// Exports the ledger to JSONL (as `postern audit export` does) and times verification of
/// the file: parse, re-hash, link, order, signatures, lifecycle.
async fn verify_throughput(db: &Path, key: &SigningKey, dir: &Path) -> (f64, u64) {
    let url = format!("sqlite://{}", db.display());
    let (ledger, _) = Ledger::open(&url, LedgerOptions::default()).await.unwrap();
    let out = dir.join("audit-export.jsonl");
    let mut w = BufWriter::new(std::fs::File::create(&out).unwrap());
    for c in ledger.read().checkpoints().await.unwrap() {
        writeln!(
            w,
            "{}",
            serde_json::to_string(&ExportLine::Checkpoint(c)).unwrap()
        )
        .unwrap();
    }
    ledger
        .read()
        .scan_events(|e| {
            writeln!(
                w,
                "{}",
                serde_json::to_string(&ExportLine::Event(e.unwrap())).unwrap()
            )
            .unwrap()
        })
        .await
        .unwrap();
    w.flush().unwrap();
    drop(w);
    // Verification is offline: the ledger is closed (its threads gone) before it is timed.
    ledger.close().await;
    // The median of three runs: this VM's CPU speed wanders between runs.
    let mut runs: Vec<(f64, u64)> = (0..3).map(|_| verify_file(&out, key)).collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs[1]
}

/// Times verification of an export file: parse, re-hash, link, order, signatures, lifecycle.
fn verify_file(export: &Path, key: &SigningKey) -> (f64, u64) {
    let started = Instant::now();
    let reader = BufReader::with_capacity(1 << 20, std::fs::File::open(export).unwrap());
    let report = verify_export(reader, key.verifying_key(), |_, _| {}).unwrap();
    let events = report.events;
    let header_note = report.breaks.len();
    // The bench writes no header line, which the verifier rightly reports; nothing else may break.
    assert_eq!(header_note, 1, "{report}");
    (events as f64 / started.elapsed().as_secs_f64(), events)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let seconds: f64 = arg("--seconds").map_or(3.0, |s| s.parse().unwrap());
    let keep = arg("--keep").map(PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("postern-bench-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).unwrap();
    let key = Arc::new(SigningKey::from_bytes([9u8; 32]));
    if let Some(export) = arg("--verify-file") {
        // Verification alone, repeated on one kept export (`--keep DIR` leaves
        // DIR/audit-export.jsonl): a steadier figure for comparing verifier changes.
        for _ in 0..5 {
            let (rate, events) = verify_file(Path::new(&export), &key);
            println!("audit verify ({events} events): {rate:>10.0} events/s");
        }
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    println!(
        "postern ledger benchmark — SQLite (WAL, synchronous=FULL) in {}",
        dir.display()
    );
    // The disk's speed drifts within seconds, so the baseline is not probed once: every level
    // runs in ROUNDS slices, each right after a slice of the fsync probe (and, at concurrency
    // 1, beside a slice of SQLite alone), and each figure is compared with the probe's rate
    // over the same stretch of time.
    let slice = Duration::from_secs_f64(seconds / ROUNDS as f64);
    let probe_slice = slice.mul_f64(0.5).max(Duration::from_millis(100));
    let mut last_db = None;
    let levels: Vec<usize> = arg("--concurrency").map_or(vec![1, 16, 64], |s| {
        s.split(',').map(|c| c.parse().unwrap()).collect()
    });
    for c in levels {
        let workload = rt.block_on(LedgerWorkload::open(&dir, c, key.clone()));
        let mut bare = (c == 1).then(|| rt.block_on(bare::BareSqlite::open(&dir)));
        let (mut fsync, mut ledger, mut alone) =
            (Tally::default(), Tally::default(), Tally::default());
        for _ in 0..ROUNDS {
            fsync.add_rate(fsync_rate(&dir, probe_slice), probe_slice);
            let started = Instant::now();
            ledger.add(rt.block_on(workload.run(c, slice)), started);
            if let Some(bare) = &mut bare {
                let started = Instant::now();
                alone.add(bare.run(slice), started);
            }
        }
        let (raw, rate) = (fsync.rate(), ledger.rate());
        let floor = raw / 2.0;
        println!("raw fsync rate (512 B append + fdatasync), interleaved: {raw:>10.0} /s");
        println!(
            "concurrency {c:>2}: {rate:>10.0} durable executions/s = {:>5.2}× the two-commit floor ({floor:.0}/s), {:>5.2}× the raw fsync rate",
            rate / floor,
            rate / raw
        );
        if let Some(bare) = bare {
            // The same two commits by SQLite alone, and SQLite's cheapest commit: what the
            // storage engine costs here, apart from what the ledger adds.
            bare.close();
            let alone = alone.rate();
            println!(
                "SQLite alone, the same two commits: {alone:>10.0} executions/s = {:>5.2}× the two-commit floor; the ledger at concurrency 1 = {:.2}× of it",
                alone / floor,
                rate / alone
            );
            let raw = fsync_rate(&dir, probe_slice * 2);
            let minimal = bare::minimal_commit_rate(&dir, (slice * 2).as_secs_f64());
            println!(
                "SQLite alone, one 200 B row per commit: {minimal:>10.0} commits/s = {:>5.2}× the raw fsync rate just before it ({raw:.0}/s)",
                minimal / raw
            );
        }
        last_db = Some(rt.block_on(workload.finish()));
    }
    let db = last_db.unwrap();
    let (verify_rate, events) = rt.block_on(verify_throughput(&db, &key, &dir));
    println!(
        "audit verify (JSONL export, {events} events, median of 3): {verify_rate:>10.0} events/s"
    );
    if keep.is_some() {
        println!(
            "kept: {} (verify with postern audit verify --store sqlite://{} --public-key {})",
            dir.display(),
            db.display(),
            key.verifying_key()
        );
    } else {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! What the model-based tests share: a throw-away directory on tmpfs, and running a strategy's
//! cases with a fixed or a printed random seed.

use std::future::Future;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config as RunnerConfig, RngSeed, TestCaseError, TestRunner};

/// A directory for one case's ledger, on tmpfs when there is one (each case commits a few
/// dozen times), removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = std::path::Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("postern-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cases` cases of `strategy` through `play` on a two-thread runtime, with `seed`;
/// panics naming the seed when a case fails.
pub fn run_cases<S, F, Fut>(seed: u64, cases: u32, strategy: S, play: F)
where
    S: Strategy,
    F: Fn(S::Value) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let result = runner.run(&strategy, |case| {
        runtime.block_on(play(case)).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("seed {seed}: {e}");
    }
}

/// A seed from the clock, printed so a failure can be replayed.
pub fn random_seed(what: &str) -> u64 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("{what}: random seed {seed}");
    seed
}

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

/// A real gateway on a real SQLite ledger, in front of a simulated HTTP target; stopped and
/// started again as a restart would (what the process held in memory is lost).
pub struct ModelGateway {
    url: String,
    config: postern_core::config::Config,
    sender: std::sync::Arc<dyn postern_channels::http::HttpSender>,
    gateway: Option<std::sync::Arc<postern_pipeline::Gateway>>,
}

impl ModelGateway {
    /// A gateway with `config` on a ledger in `dir`, sending through `sender`; not started.
    pub fn new(
        dir: &TempDir,
        config: postern_core::config::Config,
        sender: std::sync::Arc<dyn postern_channels::http::HttpSender>,
    ) -> ModelGateway {
        ModelGateway {
            url: format!("sqlite://{}", dir.0.join("ledger.db").display()),
            config,
            sender,
            gateway: None,
        }
    }

    pub async fn start(&mut self) {
        use postern_pipeline::{Dialers, Gateway, Registry, Resolved};
        let ledger = postern_ledger::Ledger::open(&self.url, Default::default())
            .await
            .unwrap()
            .0;
        let dialers = Dialers::http_only(self.sender.clone());
        let registry = Registry::new(&self.config.tools, &Resolved::default(), &dialers).unwrap();
        self.gateway = Some(std::sync::Arc::new(Gateway::unchecked(
            self.config.clone(),
            registry,
            postern_core::FingerprintKey::new(&[7u8; 32]).unwrap(),
            std::sync::Arc::new(ledger),
        )));
    }

    pub fn get(&self) -> &std::sync::Arc<postern_pipeline::Gateway> {
        self.gateway.as_ref().unwrap()
    }

    /// A graceful stop: background sends finish, the ledger is closed.
    pub async fn stop(&mut self) {
        let gateway = self.gateway.take().unwrap();
        gateway.drain(std::time::Duration::from_secs(5)).await;
        let ledger = gateway.ledger().clone();
        drop(gateway);
        if let Ok(ledger) = std::sync::Arc::try_unwrap(ledger) {
            ledger.close().await;
        }
    }
}

/// A `tools/call` of `tool` by `actor` with `arguments`, and nothing else.
pub fn tool_call(
    actor: &str,
    tool: &str,
    arguments: serde_json::Value,
) -> postern_pipeline::ToolCall {
    postern_pipeline::ToolCall {
        actor: actor.into(),
        tool: tool.into(),
        arguments: arguments.as_object().cloned().unwrap_or_default(),
        operation_key: None,
        reissue_key: None,
        intent_scope: None,
        run_id: None,
        client_address: None,
        principal: None,
        request_id: None,
        trace_parent: None,
        cancel: None,
        progress: None,
        asker: None,
    }
}

/// The target's answer `status` with a small JSON body.
pub fn answered(
    req: &postern_channels::http::HttpDispatch,
    status: u16,
) -> postern_channels::http::HttpOutcome {
    answered_with(req, status, b"{\"ok\":true}".to_vec())
}

/// The target's answer `status` with `body`.
pub fn answered_with(
    req: &postern_channels::http::HttpDispatch,
    status: u16,
    body: Vec<u8>,
) -> postern_channels::http::HttpOutcome {
    postern_channels::http::HttpOutcome::Answered(postern_channels::http::HttpAnswer {
        status,
        verdict: req.outcome_rules.verdict(status),
        headers: Vec::new(),
        size: body.len() as u64,
        body,
        truncated: false,
        body_error: None,
    })
}

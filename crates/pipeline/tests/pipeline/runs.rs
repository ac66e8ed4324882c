//! The Sessions log across replicas: two gateways on one store, one run served by both. An end
//! the run did not choose (another replica's idle pass, or its graceful stop) must not stick
//! while a gateway goes on serving the run: its next call there, once that gateway's memory of
//! the run has aged (half of `session_idle`), resumes it. And a run seen again is not idle.

use std::sync::Arc;
use std::time::Duration;

use postern_core::config::Config;
use postern_core::{FingerprintKey, Timestamp};
use postern_ledger::{Ledger, LedgerOptions, Run, RunEnd};
use postern_pipeline::{Dialers, Gateway, Registry, Resolved};

use crate::model_support::TempDir;

const CONFIG: &str = r#"
[gateway]
fingerprint_key = { env = "UNUSED" }
session_idle = "1s"

[[actor]]
name = "agent"
token = { env = "UNUSED" }
"#;

async fn replica(url: &str) -> Arc<Gateway> {
    let config = Config::parse(CONFIG, "runs.toml").unwrap();
    let http = Arc::new(postern_channels::http::HttpChannel::new());
    let registry = Registry::new(
        &config.tools,
        &Resolved::default(),
        &Dialers::http_only(http),
    )
    .unwrap();
    let ledger = Ledger::open(url, LedgerOptions::default()).await.unwrap().0;
    Arc::new(Gateway::unchecked(
        config,
        registry,
        FingerprintKey::new(&[7u8; 32]).unwrap(),
        Arc::new(ledger),
    ))
}

fn now() -> Timestamp {
    postern_pipeline::now()
}

/// What the front does on every call: record the run unless this process remembers it.
async fn call_seen(gateway: &Gateway, id: &str) {
    if !gateway.runs().is_open(id) {
        gateway
            .runs()
            .open(Run::new(
                id.into(),
                "agent".into(),
                "streamable-http".into(),
                now(),
            ))
            .await;
    }
}

async fn end_of(gateway: &Gateway, id: &str) -> Option<RunEnd> {
    gateway
        .ledger()
        .read()
        .run(id)
        .await
        .unwrap()
        .unwrap()
        .end_reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_another_replica_ended_is_resumed_by_the_next_call_here() {
    let dir = TempDir::new("runs-replicas");
    let url = format!("sqlite://{}", dir.0.join("ledger.db").display());
    let (a, b) = (replica(&url).await, replica(&url).await);

    call_seen(&a, "run-1").await;
    assert!(a.runs().is_open("run-1"));
    // Replica B's idle pass, once the run has been quiet for session_idle.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let cut = Timestamp(now().0 - 1000);
    let ended = b.ledger().expire_runs(cut, now()).await.unwrap();
    assert_eq!(ended, ["run-1"]);
    assert_eq!(end_of(&a, "run-1").await, Some(RunEnd::IdleExpired));
    // A no longer trusts its memory of the run: its next call records it again, resumed.
    assert!(!a.runs().is_open("run-1"));
    call_seen(&a, "run-1").await;
    assert_eq!(end_of(&a, "run-1").await, None, "resumed");
    // Seen again just now: B's idle pass leaves it alone although it has no call since.
    let cut = Timestamp(now().0 - 1000);
    assert!(b.ledger().expire_runs(cut, now()).await.unwrap().is_empty());
    assert_eq!(end_of(&a, "run-1").await, None);

    // B stops gracefully while A serves the run: A's next call (after its memory aged)
    // resumes it; a run its client closed is never resumed.
    call_seen(&b, "run-1").await;
    b.runs().end_open().await;
    assert_eq!(end_of(&a, "run-1").await, Some(RunEnd::GatewayStopped));
    tokio::time::sleep(Duration::from_millis(600)).await;
    call_seen(&a, "run-1").await;
    assert_eq!(end_of(&a, "run-1").await, None, "resumed after B stopped");
    a.runs().end("run-1", RunEnd::Closed).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    call_seen(&b, "run-1").await;
    assert_eq!(end_of(&a, "run-1").await, Some(RunEnd::Closed));
}

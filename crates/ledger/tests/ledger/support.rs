//! Fresh stores for tests: a SQLite file in a temporary directory, or a new database on the
//! machine's PostgreSQL (`POSTERN_TEST_PG`, default postgres://postgres@127.0.0.1:5432/postgres).

use std::path::PathBuf;
use std::sync::Arc;

use postern_audit::{SigningKey, Verifier};
use postern_core::config::Config;
use postern_core::EventKind;
use postern_core::{ActionRecord, Arguments, FingerprintKey, Timestamp};
use postern_ledger::{AcceptRequest, Ledger, NewEvent};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "postern-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub use postern_testkit::postgres::test_admin_url as pg_admin_url;

/// A store URL no other test uses. Keep the returned guard alive as long as the store.
pub async fn fresh_store(backend: Backend) -> (String, TempDir) {
    let dir = TempDir::new("ledger");
    match backend {
        Backend::Sqlite => (
            format!("sqlite://{}", dir.0.join("ledger.db").display()),
            dir,
        ),
        Backend::Postgres => {
            let db =
                postern_testkit::postgres::FreshDatabase::create(&pg_admin_url(), "postern_test");
            (db.keep(), dir)
        }
    }
}

pub const CONFIG: &str = r#"
[gateway]
fingerprint_key = { env = "UNUSED" }
[[tool]]
name = "create_invoice"
class = "idempotent_write"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/invoices" }
[[tool]]
name = "wire_money"
class = "irreversible"
match_window = "1h"
http = { method = "POST", url = "http://127.0.0.1:9/wires" }
[[tool]]
name = "list_invoices"
class = "read_only"
http = { method = "GET", url = "http://127.0.0.1:9/invoices" }
"#;

pub fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    )
}

pub fn request(tool: &str, actor: &str, arguments: &str) -> AcceptRequest {
    let config = Config::parse(CONFIG, "test.toml").unwrap();
    let contract = Arc::new(config.tool(tool).unwrap().clone());
    let key = FingerprintKey::new(&[42u8; 32]).unwrap();
    let record = ActionRecord::build(
        &contract,
        actor,
        None,
        &Arguments::parse(arguments).unwrap(),
        &key,
    )
    .unwrap();
    AcceptRequest::new(record, &key, contract, now()).unwrap()
}

pub const SIGNING_HEX: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";

pub fn signing_key() -> Arc<SigningKey> {
    Arc::new(SigningKey::from_hex(SIGNING_HEX).unwrap())
}

/// Verifies the whole store offline, as `postern audit verify --store` does.
pub async fn verify(ledger: &Ledger) -> postern_audit::Report {
    let mut v = Verifier::new(signing_key().verifying_key());
    for r in ledger.read().pruned_ranges().await.unwrap() {
        v.pruned(r);
    }
    let mut bad = Vec::new();
    ledger
        .read()
        .scan_events(|row| match row {
            Ok(e) => v.event(&e),
            Err(b) => bad.push(b),
        })
        .await
        .unwrap();
    for (pos, reason) in bad {
        v.malformed(pos as u64, reason);
    }
    for c in ledger.read().checkpoints().await.unwrap() {
        v.checkpoint(&c);
    }
    v.finish()
}

/// The options every conformance test opens a ledger with: signed checkpoints every 5 events
/// and a short lease (so liveness tests run quickly).
pub fn options() -> postern_ledger::LedgerOptions {
    postern_ledger::LedgerOptions {
        signing_key: Some(signing_key()),
        checkpoint_every: 5,
        lease: std::time::Duration::from_secs(1),
        ..postern_ledger::LedgerOptions::default()
    }
}

pub async fn open(url: &str) -> postern_ledger::Ledger {
    postern_ledger::Ledger::open(url, options())
        .await
        .unwrap()
        .0
}

/// A request whose accept also records `authorized` and `dispatched` (as the gateway sends it).
pub fn dispatched_request(tool: &str, actor: &str, arguments: &str) -> AcceptRequest {
    request(tool, actor, arguments).then(vec![
        NewEvent::new(EventKind::Authorized),
        NewEvent::new(EventKind::Dispatched),
    ])
}

/// How many executions the ledger lists (up to 10,000).
pub async fn count(ledger: &postern_ledger::Ledger) -> usize {
    ledger
        .read()
        .list(&postern_ledger::ListFilter {
            limit: 10_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .len()
}

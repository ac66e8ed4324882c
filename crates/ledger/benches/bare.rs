//! SQLite alone: an execution's two commits, written straight through rusqlite with rows of the
//! sizes the ledger writes, into the ledger's own schema, and no Postern code in the loop.
//!
//! This separates the storage engine's cost from the ledger's: the ratio of the ledger's
//! concurrency-1 rate to this one is what Postern adds (hashing, JSON, the state machine,
//! the combiner); the ratio of this one to the fsync floor is what SQLite's commit of these
//! pages costs on this disk.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use postern_ledger::{Ledger, LedgerOptions};
use rusqlite::{params, Connection};

/// SQLite alone doing an execution's two durable commits: intent slot + execution row + three
/// events, then result + row update + one event. Kept open between the benchmark's slices.
pub struct BareSqlite {
    path: PathBuf,
    conn: Connection,
    record: String,
    accepted_detail: String,
    hash: String,
    i: i64,
    seq: i64,
}

impl BareSqlite {
    pub async fn open(dir: &Path) -> BareSqlite {
        let path = dir.join("bare-sqlite.db");
        remove_database(&path);
        // The ledger creates the file, so the schema (tables, indexes, page size) is the real one.
        let url = format!("sqlite://{}", path.display());
        let (ledger, _) = Ledger::open(&url, LedgerOptions::default()).await.unwrap();
        ledger.close().await;
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 30000;",
        )
        .unwrap();
        BareSqlite {
            path,
            conn,
            record: format!(
                "{{\"actor\":\"bench\",\"arguments\":{{\"amount\":0,\"customer\":\"w0\"}},{}}}",
                "x".repeat(150)
            ),
            accepted_detail: format!("{{\"fingerprint\":\"{}\"}}", "f".repeat(115)),
            hash: "0".repeat(64),
            i: 0,
            seq: 0,
        }
    }

    /// Runs executions for `duration`; returns how many completed.
    pub fn run(&mut self, duration: Duration) -> u64 {
        let started = Instant::now();
        let mut done = 0;
        while started.elapsed() < duration {
            self.execution();
            done += 1;
        }
        done
    }

    fn execution(&mut self) {
        let (conn, record, accepted_detail, hash) =
            (&self.conn, &self.record, &self.accepted_detail, &self.hash);
        let (i, seq) = (self.i, self.seq);
        let id = format!("exe_{i:026}");
        // Scattered like real HMAC fingerprints: the intent slot's key lands on a random leaf.
        let fingerprint = format!(
            "hmac-sha256:{}",
            postern_core::hexdigits::encode(postern_core::digest::sha256(&i.to_le_bytes()))
        );
        let now = 1_796_000_000_000 + i;
        conn.prepare_cached("BEGIN IMMEDIATE")
            .unwrap()
            .execute([])
            .unwrap();
        conn.prepare_cached(
            "INSERT INTO intents (actor, intent_scope, fingerprint, execution_id) \
             VALUES ('bench', 'bench', ?1, ?2)",
        )
        .unwrap()
        .execute(params![fingerprint, id])
        .unwrap();
        conn.prepare_cached(
            "INSERT INTO executions (id, actor, tool, class, fingerprint, intent_scope, \
             operation_key, record, run_id, state, n, dispatches, cancel_requested, accepted_at, \
             state_since, first_dispatched_at, rejection_retryable, owner) VALUES (?1, 'bench', \
             'create_invoice', 'idempotent_write', ?2, 'bench', NULL, ?3, NULL, 'dispatched', 3, \
             1, 0, ?4, ?4, ?4, 0, 'inst-01a22ae5579376c79ef1c117d27419c3')",
        )
        .unwrap()
        .execute(params![id, fingerprint, record, now])
        .unwrap();
        conn.prepare_cached(
            "INSERT INTO events (chain, seq, execution_id, n, event, at, detail, prev_hash, hash) \
             VALUES ('main', ?1, ?3, 1, 'accepted', ?4, ?5, ?6, ?6), \
             ('main', ?1 + 1, ?3, 2, 'authorized', ?4, '{}', ?6, ?6), \
             ('main', ?2, ?3, 3, 'dispatched', ?4, ?7, ?6, ?6)",
        )
        .unwrap()
        .execute(params![
            seq + 1,
            seq + 3,
            id,
            now,
            accepted_detail,
            hash,
            format!("{{\"attempt\":1,\"idempotency_key\":\"{id}\"}}")
        ])
        .unwrap();
        conn.prepare_cached("COMMIT").unwrap().execute([]).unwrap();

        conn.prepare_cached("BEGIN IMMEDIATE")
            .unwrap()
            .execute([])
            .unwrap();
        conn.prepare_cached(
            "INSERT INTO results (execution_id, attempt, digest, size, truncated, body) \
             VALUES (?1, 1, ?2, 30, 0, ?3)",
        )
        .unwrap()
        .execute(params![
            id,
            format!("sha256:{hash}"),
            &br#"{"id":"inv_1","status":"open"}"#[..]
        ])
        .unwrap();
        conn.prepare_cached(
            "UPDATE executions SET state = 'completed(applied)', n = 4, state_since = ?1, \
             owner = 'inst-01a22ae5579376c79ef1c117d27419c3' WHERE id = ?2",
        )
        .unwrap()
        .execute(params![now, id])
        .unwrap();
        conn.prepare_cached(
            "INSERT INTO events (chain, seq, execution_id, n, event, at, detail, prev_hash, hash) \
             VALUES ('main', ?1, ?2, 4, 'completed(applied)', ?3, ?4, ?5, ?5)",
        )
        .unwrap()
        .execute(params![
            seq + 4,
            id,
            now,
            format!("{{\"result_digest\":\"sha256:{hash}\",\"result_ref\":\"results/{id}/1\",\"result_size\":30}}"),
            hash
        ])
        .unwrap();
        conn.prepare_cached("COMMIT").unwrap().execute([]).unwrap();
        self.i += 1;
        self.seq += 4;
    }

    pub fn close(self) {
        drop(self.conn);
        remove_database(&self.path);
    }
}

/// Commits per second for the cheapest SQLite commit there is: one small row in one table,
/// same pragmas and page size. SQLite's own floor on this disk.
pub fn minimal_commit_rate(dir: &Path, seconds: f64) -> f64 {
    let path = dir.join("bare-minimal.db");
    remove_database(&path);
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
         CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL);",
    )
    .unwrap();
    let row = "x".repeat(200);
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < Duration::from_secs_f64(seconds) {
        conn.prepare_cached("INSERT INTO t (v) VALUES (?1)")
            .unwrap()
            .execute([&row])
            .unwrap();
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(conn);
    remove_database(&path);
    rate
}

/// Removes a SQLite database and its WAL and shared-memory files.
fn remove_database(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

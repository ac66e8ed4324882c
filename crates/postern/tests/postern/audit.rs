//! `postern audit export` and `postern audit verify` against tampering: a real SQLite ledger
//! written through the library, a real exported JSONL file, the real binary. Every tamper must
//! be reported with its reason and seq, and exit 1; the untouched log must verify (exit 0).
//!
//! The fixture: 10 executions, each accepted → authorized → dispatched → completed(applied)
//! (with a stored result) → delivered, so execution `k` (from 1) holds seqs `5k-4 ..= 5k`, and
//! checkpoints signed every 4 events plus one at the head (seq 50).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use postern_audit::SigningKey;
use postern_core::config::Config;
use postern_core::lifecycle::Verdict;
use postern_core::{ActionRecord, Arguments, EventKind, FingerprintKey, Timestamp};
use postern_ledger::{AcceptOutcome, AcceptRequest, Ledger, LedgerOptions, NewEvent, ResultBody};
use sqlx::{Connection, SqliteConnection};

const EXECUTIONS: u64 = 10;
pub(crate) const HEAD: u64 = EXECUTIONS * 5;
pub(crate) const SIGNING_KEY: [u8; 32] = [7; 32];

const CONFIG: &str = r#"
[gateway]
fingerprint_key = { env = "UNUSED" }
[[tool]]
name = "create_invoice"
class = "idempotent_write"
match_window = "10m"
http = { method = "POST", url = "http://127.0.0.1:9/invoices" }
"#;

/// A fresh directory holding a ledger written through the library, and the key files.
pub(crate) struct Fixture {
    pub(crate) dir: PathBuf,
    pub(crate) db: PathBuf,
    /// The store's URL: the SQLite file `db`, or a database on the machine's PostgreSQL.
    pub(crate) store: String,
    pub(crate) signing_key_file: PathBuf,
    pub(crate) public_key: String,
    /// The seqs of the signed checkpoints, ascending.
    pub(crate) checkpoints: Vec<u64>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    )
}

fn request(amount: u64) -> AcceptRequest {
    let config = Config::parse(CONFIG, "test.toml").unwrap();
    let contract = Arc::new(config.tool("create_invoice").unwrap().clone());
    let key = FingerprintKey::new(&[42u8; 32]).unwrap();
    let args = Arguments::parse(&format!(r#"{{"customer":"acme","amount":{amount}}}"#)).unwrap();
    let record = ActionRecord::build(&contract, "billing-agent", None, &args, &key).unwrap();
    AcceptRequest::new(record, &key, contract, now()).unwrap()
}

impl Fixture {
    /// The ledger in a SQLite file.
    pub(crate) fn new(tag: &str) -> Fixture {
        Fixture::with_store(tag, None)
    }

    /// The ledger in a fresh database on the machine's PostgreSQL.
    fn on_postgres(tag: &str) -> Fixture {
        let url = runtime().block_on(crate::harness::fresh_postgres());
        Fixture::with_store(tag, Some(url))
    }

    fn with_store(tag: &str, postgres: Option<String>) -> Fixture {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "postern-audit-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = Arc::new(SigningKey::from_bytes(SIGNING_KEY));
        let signing_key_file = dir.join("audit.key");
        crate::harness::write_private(&signing_key_file, &key.to_hex());
        let db = dir.join("ledger.db");
        let mut f = Fixture {
            store: postgres.unwrap_or_else(|| format!("sqlite://{}", db.display())),
            db,
            dir,
            signing_key_file,
            public_key: key.verifying_key().to_string(),
            checkpoints: Vec::new(),
        };
        let url = f.store_url();
        f.checkpoints = runtime().block_on(async move {
            let options = LedgerOptions {
                signing_key: Some(key),
                checkpoint_every: 4,
                ..LedgerOptions::default()
            };
            let (ledger, _) = Ledger::open(&url, options).await.unwrap();
            for i in 1..=EXECUTIONS {
                let AcceptOutcome::Created { execution: e, .. } =
                    ledger.accept(request(i)).await.unwrap()
                else {
                    panic!("execution {i} was matched to a prior one");
                };
                let body = format!(r#"{{"invoice":"inv_{i}"}}"#).into_bytes();
                let result = ResultBody {
                    size: body.len() as u64,
                    body,
                    truncated: false,
                };
                for event in [
                    NewEvent::new(EventKind::Authorized),
                    NewEvent::new(EventKind::Dispatched),
                    NewEvent::new(EventKind::Completed(Verdict::Applied)).with_result(result),
                    NewEvent::new(EventKind::Delivered),
                ] {
                    ledger.append(e.id, event, now()).await.unwrap();
                }
            }
            ledger.checkpoint(now()).await.unwrap();
            let seqs = ledger.read().checkpoints().await.unwrap();
            ledger.close().await;
            seqs.iter().map(|c| c.seq).collect()
        });
        assert_eq!(f.checkpoints.last(), Some(&HEAD), "the head must be signed");
        assert!(f.checkpoints.len() > 2, "{:?}", f.checkpoints);
        f
    }

    pub(crate) fn store_url(&self) -> String {
        self.store.clone()
    }

    /// Runs `postern` in the fixture's directory (so no stray postern.toml is picked up).
    pub(crate) fn postern(&self, args: &[&str]) -> Run {
        let out = Command::new(env!("CARGO_BIN_EXE_postern"))
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap();
        Run {
            args: args.join(" "),
            code: out.status.code(),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }

    /// `postern audit export --out OUT`, checked to succeed.
    pub(crate) fn export_to(&self, out: &std::path::Path) -> Run {
        let run = self.postern(&[
            "audit",
            "export",
            "--store",
            &self.store_url(),
            "--out",
            out.to_str().unwrap(),
            "--signing-key",
            self.signing_key_file.to_str().unwrap(),
        ]);
        assert_eq!(run.code, Some(0), "{run}");
        run
    }

    /// `postern audit export`, checked to succeed; returns the file's lines.
    pub(crate) fn export(&self) -> Vec<String> {
        let out = self.dir.join("audit.jsonl");
        self.export_to(&out);
        std::fs::read_to_string(out)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }

    /// `postern audit verify (--file FILE | --store URL) --public-key KEY`.
    pub(crate) fn verify(&self, source: [&str; 2], public_key: &str) -> Run {
        let mut args = vec!["audit", "verify"];
        args.extend(source);
        args.extend(["--public-key", public_key]);
        self.postern(&args)
    }

    /// Writes `lines` to a file of the fixture and verifies it.
    pub(crate) fn verify_lines(&self, name: &str, lines: &[String]) -> Run {
        let path = self.dir.join(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        self.verify(["--file", path.to_str().unwrap()], &self.public_key)
    }

    pub(crate) fn verify_store(&self) -> Run {
        self.verify(["--store", &self.store_url()], &self.public_key)
    }

    /// The ids of the store's executions, oldest first.
    pub(crate) fn executions(&self) -> Vec<String> {
        let url = self.store_url();
        runtime().block_on(async move {
            let store = postern_ledger::StoreReader::open(&url).await.unwrap();
            let filter = postern_ledger::ListFilter {
                limit: 1000,
                ..Default::default()
            };
            let mut ids: Vec<String> = store
                .list(&filter)
                .await
                .unwrap()
                .iter()
                .map(|e| e.id.to_string())
                .collect();
            ids.reverse();
            ids
        })
    }

    /// Runs SQL statements directly on the store, as someone with write access could.
    pub(crate) fn sql(&self, statements: &[String]) {
        let url = self.store_url();
        // The same statements through either driver's connection type.
        macro_rules! apply {
            ($conn:ty) => {{
                let mut conn = <$conn>::connect(&url).await.unwrap();
                for s in statements {
                    let done = sqlx::query(s).execute(&mut conn).await.unwrap();
                    assert!(done.rows_affected() > 0, "{s} changed nothing");
                }
                conn.close().await.unwrap();
            }};
        }
        runtime().block_on(async move {
            if url.starts_with("postgres") {
                apply!(sqlx::PgConnection)
            } else {
                apply!(SqliteConnection)
            }
        });
    }

    fn rowid_of(&self, seq: u64) -> i64 {
        let url = self.store_url();
        runtime().block_on(async move {
            let mut conn = SqliteConnection::connect(&url).await.unwrap();
            let q = "SELECT rowid FROM events WHERE chain = 'main' AND seq = $1";
            let rowid = sqlx::query_scalar(q)
                .bind(seq as i64)
                .fetch_one(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
            rowid
        })
    }
}

/// One run of the binary.
pub(crate) struct Run {
    pub(crate) args: String,
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "postern {}\nexit: {:?}\nstdout:\n{}\nstderr:\n{}",
            self.args, self.code, self.stdout, self.stderr
        )
    }
}

impl Run {
    pub(crate) fn assert_valid(&self) {
        assert_eq!(self.code, Some(0), "{self}");
        assert!(
            self.stdout.lines().any(|l| l.starts_with("VALID:")),
            "{self}"
        );
        assert!(!self.stdout.contains("BREAK"), "{self}");
    }

    /// Exit 1, and exactly these breaks: each expected text is found in its own BREAK line.
    pub(crate) fn assert_breaks<S: AsRef<str>>(&self, expected: &[S]) {
        assert_eq!(self.code, Some(1), "{self}");
        let breaks: Vec<&str> = self
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("BREAK "))
            .collect();
        assert_eq!(breaks.len(), expected.len(), "{self}");
        for e in expected.iter().map(AsRef::as_ref) {
            assert!(
                breaks.iter().any(|b| b.contains(e)),
                "no BREAK with {e:?} in\n{self}"
            );
        }
        let invalid = format!("INVALID: {} break(s)", expected.len());
        assert!(self.stdout.contains(&invalid), "{self}");
    }
}

/// The index of the export line holding the event at `seq`.
fn event_line(lines: &[String], seq: u64) -> usize {
    line_of(lines, "event", seq)
}

/// The index of the export line holding the `kind` ("event", "checkpoint") at `seq`.
fn line_of(lines: &[String], kind: &str, seq: u64) -> usize {
    lines
        .iter()
        .position(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v[kind]["seq"] == seq
        })
        .unwrap_or_else(|| panic!("no {kind} line for seq {seq}"))
}

/// Changes the one byte `offset` bytes after `marker` to another digit ('0' ↔ '1'), which keeps
/// a number a number, hex hex, and the line valid JSON.
fn flip_byte(line: &mut String, marker: &str, offset: usize) {
    let at = line
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} not in {line}"))
        + marker.len();
    let mut bytes = std::mem::take(line).into_bytes();
    let b = &mut bytes[at + offset];
    assert!(b.is_ascii_hexdigit(), "{:?} is not a digit", *b as char);
    *b = if *b == b'0' { b'1' } else { b'0' };
    *line = String::from_utf8(bytes).unwrap();
    serde_json::from_str::<serde_json::Value>(line).unwrap();
}

pub(crate) fn hash_mismatch(seq: u64) -> String {
    format!("hash mismatch at seq {seq} (chain main): the event's content does not match its hash")
}

fn truncations(f: &Fixture, kept: u64) -> Vec<String> {
    let expected: Vec<String> = f
        .checkpoints
        .iter()
        .filter(|s| **s > kept)
        .map(|s| {
            format!("truncation behind a signed checkpoint at seq {s} (chain main): the log ends at seq {kept}")
        })
        .collect();
    assert!(!expected.is_empty());
    expected
}

/// The breaks a deleted event 7 (execution 2's `authorized`) gives: a gap, and its execution's
/// lifecycle missing event #2.
const GAP_AT_8: [&str; 2] = [
    "gap at seq 8 (chain main): expected seq 7, events are missing",
    ": event #2 is missing",
];

const REORDER_7_AFTER_8: [&str; 1] = ["reorder at seq 7 (chain main): arrives after seq 8"];

fn bad_signature(seq: u64) -> Vec<String> {
    vec![format!(
        "bad signature at seq {seq} (chain main): the checkpoint's signature does not verify"
    )]
}

/// One byte edited in an exported event, in its `detail` (the stored result's digest) or in its
/// `at`, is a hash mismatch at that event's seq, and nowhere else.
#[test]
fn export_one_byte_edit_is_a_hash_mismatch() {
    let f = Fixture::new("file-edit");
    let lines = f.export();
    f.verify_lines("clean.jsonl", &lines).assert_valid();
    // seq 9 is execution 2's completed(applied), seq 7 its authorized.
    for (seq, marker, offset) in [(9, r#""result_digest":"sha256:"#, 10), (7, r#""at":"#, 5)] {
        let mut tampered = lines.clone();
        flip_byte(&mut tampered[event_line(&lines, seq)], marker, offset);
        f.verify_lines("edited.jsonl", &tampered)
            .assert_breaks(&[hash_mismatch(seq)]);
    }
}

/// A deleted event line is a gap at the next seq, naming the missing one.
#[test]
fn export_deleted_event_is_a_gap() {
    let f = Fixture::new("file-delete");
    let mut lines = f.export();
    f.verify_lines("clean.jsonl", &lines).assert_valid();
    lines.remove(event_line(&lines, 7));
    f.verify_lines("deleted.jsonl", &lines)
        .assert_breaks(&GAP_AT_8);
}

/// Two swapped event lines are a reorder (not a loss).
#[test]
fn export_swapped_events_are_a_reorder() {
    let f = Fixture::new("file-swap");
    let mut lines = f.export();
    f.verify_lines("clean.jsonl", &lines).assert_valid();
    let (a, b) = (event_line(&lines, 7), event_line(&lines, 8));
    lines.swap(a, b);
    f.verify_lines("swapped.jsonl", &lines)
        .assert_breaks(&REORDER_7_AFTER_8);
}

/// A truncated tail is caught by the signed checkpoints beyond it; a file cut to nothing (no
/// header saying what it should hold) is not a valid export either.
#[test]
fn export_truncated_tail_is_caught_by_signed_checkpoints() {
    let f = Fixture::new("file-truncate");
    let mut lines = f.export();
    f.verify_lines("clean.jsonl", &lines).assert_valid();
    assert_eq!(
        event_line(&lines, HEAD),
        lines.len() - 1,
        "events come last"
    );
    lines.truncate(lines.len() - 3);
    // The signed header's head, too, says the log ends at HEAD.
    let mut expected = truncations(&f, HEAD - 3);
    expected.push(format!(
        "cut before the signed head at seq {HEAD} (chain main): the export header names this head, the log ends at seq {}",
        HEAD - 3
    ));
    f.verify_lines("truncated.jsonl", &lines)
        .assert_breaks(&expected);
    let emptied = f.dir.join("emptied.jsonl");
    std::fs::write(&emptied, "").unwrap();
    f.verify(["--file", emptied.to_str().unwrap()], &f.public_key)
        .assert_breaks(&["unreadable record at line 1: no postern-audit/1 header line"]);
}

/// A checkpoint's signature replaced by another well-formed one is a bad signature at its seq.
#[test]
fn export_replaced_checkpoint_signature_is_a_bad_signature() {
    let f = Fixture::new("file-signature");
    let mut lines = f.export();
    f.verify_lines("clean.jsonl", &lines).assert_valid();
    let seq = f.checkpoints[1];
    let i = line_of(&lines, "checkpoint", seq);
    flip_byte(&mut lines[i], r#""signature":""#, 0);
    f.verify_lines("resigned.jsonl", &lines)
        .assert_breaks(&bad_signature(seq));
}

/// An event row updated in place (its `at`, then its `detail`) is a hash mismatch at its seq.
#[test]
fn store_updated_event_is_a_hash_mismatch() {
    let f = Fixture::new("db-update");
    f.verify_store().assert_valid();
    f.sql(&["UPDATE events SET at = at + 1 WHERE seq = 7".into()]);
    f.verify_store().assert_breaks(&[hash_mismatch(7)]);
    let zeros = format!("sha256:{}", "0".repeat(64));
    f.sql(&[format!(
        "UPDATE events SET detail = json_set(detail, '$.result_digest', '{zeros}') WHERE seq = 9"
    )]);
    // The forged digest no longer matches the stored body either.
    f.verify_store().assert_breaks(&[
        hash_mismatch(7),
        hash_mismatch(9),
        "result mismatch at seq 9 (chain main)".to_string(),
    ]);
}

/// Verifying a store only reads it: no migration, no recovery scan, no instance row. The file
/// is byte for byte what it was, and no WAL is left beside it.
#[test]
fn store_verification_changes_nothing() {
    let f = Fixture::new("db-read-only");
    // The fixture's ledger is closed, but its pool's last connection may still be checkpointing
    // the WAL into the file: take the file as it is once it stopped changing.
    let wal = format!("{}-wal", f.db.display());
    let mut before = std::fs::read(&f.db).unwrap();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = std::fs::read(&f.db).unwrap();
        let wal_empty = std::fs::metadata(&wal).map_or(true, |m| m.len() == 0);
        if now == before && wal_empty {
            break;
        }
        before = now;
    }
    f.verify_store().assert_valid();
    assert!(
        std::fs::read(&f.db).unwrap() == before,
        "verify changed {}",
        f.db.display()
    );
    assert!(
        std::fs::metadata(&wal).map_or(true, |m| m.len() == 0),
        "verify wrote {wal}"
    );
}

/// The store verifier on the real PostgreSQL: the untouched store is VALID, and an event
/// updated in place is a hash mismatch at its seq in the writing instance's chain.
#[test]
fn postgres_store_updated_event_is_a_hash_mismatch() {
    let f = Fixture::on_postgres("pg-update");
    f.verify_store().assert_valid();
    f.sql(&["UPDATE events SET at = at + 1 WHERE seq = 7".into()]);
    f.verify_store()
        .assert_breaks(&["hash mismatch at seq 7 (chain inst-"]);
}

/// A row that cannot even be read as an event (its hash is not hex) is reported at its
/// position in the store, and the verifier goes on past it.
#[test]
fn store_unreadable_row_is_reported_at_its_position() {
    let f = Fixture::new("db-unreadable");
    f.verify_store().assert_valid();
    let r7 = f.rowid_of(7);
    f.sql(&["UPDATE events SET hash = 'not hex' WHERE seq = 7".into()]);
    // Its absence then shows as what it is to the chain and to its execution.
    f.verify_store().assert_breaks(&[
        format!("unreadable record at line {r7}: corrupt ledger row: hash: expected 64 hex digits"),
        "gap at seq 8 (chain main): expected seq 7".to_string(),
        "is missing".to_string(),
    ]);
}

/// A deleted row in the middle is a gap.
#[test]
fn store_deleted_row_is_a_gap() {
    let f = Fixture::new("db-delete");
    f.verify_store().assert_valid();
    f.sql(&["DELETE FROM events WHERE seq = 7".into()]);
    f.verify_store().assert_breaks(&GAP_AT_8);
}

/// Two rows that trade physical places (each keeps its content) are a reorder.
#[test]
fn store_swapped_rows_are_a_reorder() {
    let f = Fixture::new("db-swap");
    f.verify_store().assert_valid();
    let (r7, r8) = (f.rowid_of(7), f.rowid_of(8));
    assert!(r7 < r8);
    f.sql(&[
        "UPDATE events SET rowid = -1 WHERE seq = 7".into(),
        format!("UPDATE events SET rowid = {r7} WHERE seq = 8"),
        format!("UPDATE events SET rowid = {r8} WHERE seq = 7"),
    ]);
    f.verify_store().assert_breaks(&REORDER_7_AFTER_8);
}

/// Deleted tail rows are caught by the signed checkpoints beyond them.
#[test]
fn store_truncated_tail_is_caught_by_signed_checkpoints() {
    let f = Fixture::new("db-truncate");
    f.verify_store().assert_valid();
    f.sql(&[format!("DELETE FROM events WHERE seq > {}", HEAD - 3)]);
    // The last execution's row still counts the events that were cut (issue 33: rows are held
    // to their chains; for a tail no checkpoint covered, this is the only sign of the cut).
    let last = f.executions().pop().unwrap();
    let mut expected = truncations(&f, HEAD - 3);
    expected.push(format!(
        "execution row edited: {last}'s event count is \"5\" in the executions table, but its chained events say \"2\""
    ));
    f.verify_store().assert_breaks(&expected);
}

/// A checkpoint row's signature replaced by another well-formed one is a bad signature.
#[test]
fn store_replaced_checkpoint_signature_is_a_bad_signature() {
    let f = Fixture::new("db-signature");
    f.verify_store().assert_valid();
    let seq = f.checkpoints[1];
    f.sql(&[format!(
        "UPDATE checkpoints SET signature = \
         (CASE substr(signature, 1, 1) WHEN '0' THEN '1' ELSE '0' END) || substr(signature, 2) \
         WHERE seq = {seq}"
    )]);
    f.verify_store().assert_breaks(&bad_signature(seq));
}

/// Checkpoints signed by another key than the one the verifier holds are each a bad signature.
#[test]
fn wrong_public_key_is_a_bad_signature() {
    let f = Fixture::new("wrong-key");
    f.export();
    let other = SigningKey::from_bytes([8; 32]).verifying_key().to_string();
    let signer = SigningKey::from_bytes(SIGNING_KEY).verifying_key().key_id();
    let expected: Vec<String> = f
        .checkpoints
        .iter()
        .map(|s| {
            format!(
                "bad signature at seq {s} (chain main): signed by key {signer}, not the key given"
            )
        })
        .collect();
    let path = f.dir.join("audit.jsonl");
    f.verify(["--store", &f.store_url()], &other)
        .assert_breaks(&expected);
    // The export's header is signed by the same key: one more break.
    let mut expected = expected;
    expected
        .push("export header at line 1 has a signature that does not verify with this key".into());
    f.verify(["--file", path.to_str().unwrap()], &other)
        .assert_breaks(&expected);
}

/// An export file or a SQLite store that is not there is an error (exit 2) naming it, not a
/// report; verifying never creates the store.
#[test]
fn missing_file_or_store_is_an_error() {
    let f = Fixture::new("missing");
    let missing = f.dir.join("no-such-export.jsonl");
    let run = f.verify(["--file", missing.to_str().unwrap()], &f.public_key);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stdout.is_empty(), "{run}");
    let wanted = format!("error: opening {}", missing.display());
    assert!(run.stderr.contains(&wanted), "{run}");

    let missing = f.dir.join("typo.db");
    let url = format!("sqlite://{}", missing.display());
    let run = f.verify(["--store", &url], &f.public_key);
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stdout.is_empty(), "{run}");
    let wanted = format!(
        "error: no store at {url}: {} does not exist",
        missing.display()
    );
    assert!(run.stderr.contains(&wanted), "{run}");
    assert!(!missing.exists(), "verify created {}", missing.display());

    // A file that is not a Postern ledger (here an empty one) is named as such, not verified
    // as an empty, valid log.
    let other = f.dir.join("other.db");
    std::fs::write(&other, b"").unwrap();
    let url = format!("sqlite://{}", other.display());
    let run = f.verify(["--store", &url], &f.public_key);
    assert_eq!(run.code, Some(2), "{run}");
    let wanted = format!("error: no store at {url}: it holds no Postern ledger");
    assert!(run.stderr.contains(&wanted), "{run}");
}

/// Issue 33, point 3: an execution's row is held to its chain. Setting a row's state back (a
/// denied call made `authorized` is the review's case; here a delivered one), or editing its
/// record, was VALID even with --require-signed-tail: each is now a BREAK naming the
/// execution, on SQLite and on PostgreSQL.
#[test]
fn an_edited_execution_row_is_a_break_naming_the_execution() {
    for f in [
        Fixture::new("row-edit"),
        Fixture::on_postgres("row-edit-pg"),
    ] {
        f.verify_store().assert_valid();
        let ids: Vec<String> = f.executions();
        let (first, second) = (&ids[0], &ids[1]);
        f.sql(&[
            format!("UPDATE executions SET state = 'authorized' WHERE id = '{first}'"),
            format!("UPDATE executions SET record = '{{\"forged\":true}}' WHERE id = '{second}'"),
        ]);
        f.verify_store().assert_breaks(&[
            format!("execution row edited: {first}'s state is \"authorized\""),
            format!("execution row edited: {second}'s record (sha256)"),
        ]);
    }
}

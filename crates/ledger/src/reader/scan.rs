//! SQLite's side of `audit verify --store`, on two threads: one reads and decodes the rows
//! (executions, events, results) straight through rusqlite, the caller's runs the checks that
//! need store order. The hashing, the costly part, is done by whichever side is behind: the
//! reading side takes it on only while the checking side lags.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use postern_audit::{EventChunk, EventColumns, ExecutionRow, ResultCheck, RowCheck, Verifier};
use postern_core::digest::sha256;
use postern_core::ExecutionId;
use rusqlite::types::ValueRef;

use crate::db::{NamedRow, RowAccess};
use crate::error::{sqlite_error as sqlite, LedgerError};
use crate::rows;

/// Rows per message between the two threads.
const CHUNK: usize = 1024;

/// SQLite's own ceiling on a mapping (larger values are clamped to it).
const MMAP_SIZE: i64 = 0x7fff_0000;

/// Messages the checking side may lag behind before the reading side hashes for it.
const BACKLOG: u64 = 2;

/// The checks a store's rows are fed to.
pub(super) struct Checks<'a> {
    pub verifier: &'a mut Verifier,
    pub results: &'a mut ResultCheck,
    pub rows: &'a mut RowCheck,
}

enum Message {
    Rows(RowBatch),
    /// Intent slots: (execution id, actor, fingerprint).
    Intents(Vec<[String; 3]>),
    Events(EventChunk),
    Results(ResultBatch),
}

impl Message {
    /// The hashing, done here when the checking side is behind.
    fn hash(&mut self) {
        match self {
            Message::Rows(b) if b.digests.is_none() => b.digest(),
            Message::Events(c) if !c.is_hashed() => c.hash(),
            _ => {}
        }
    }
}

/// Verifies the store's executions, events and results (in that order, each read after the
/// one before) into `checks`; `tick(events)` now and then.
pub(super) fn verify_sqlite(
    file: &Path,
    checks: Checks<'_>,
    tick: &mut dyn FnMut(u64),
) -> Result<(), LedgerError> {
    let consumed = AtomicU64::new(0);
    let (tx, rx) = sync_channel(8);
    // Emptied chunks go back to be filled again (fresh large buffers cost page faults).
    let (spare_tx, spare) = sync_channel(16);
    std::thread::scope(|s| {
        let consumed = &consumed;
        let reader = s.spawn(move || read_all(file, tx, &spare, consumed));
        let mut events = 0u64;
        for m in rx {
            match m {
                Message::Rows(b) => b.apply(checks.rows),
                Message::Intents(slots) => {
                    for [id, actor, fingerprint] in &slots {
                        checks.rows.intent(id, actor, fingerprint);
                    }
                }
                Message::Events(mut c) => {
                    events += c.apply(checks.verifier, checks.results, checks.rows);
                    tick(events);
                    let _ = spare_tx.try_send(c);
                }
                Message::Results(b) => b.apply(checks.results),
            }
            consumed.fetch_add(1, Ordering::Relaxed);
        }
        reader.join().unwrap_or_else(|_| {
            Err(LedgerError::Corrupt(
                "the store's reading thread panicked".into(),
            ))
        })
    })
}

/// The reading side: every table in turn, a message at a time.
fn read_all(
    file: &Path,
    tx: SyncSender<Message>,
    spare: &Receiver<EventChunk>,
    consumed: &AtomicU64,
) -> Result<(), LedgerError> {
    // One thread uses this connection: no mutex.
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(file, flags).map_err(sqlite)?;
    // Pages read through a mapping rather than copied in by read() (a setting of this
    // connection only; nothing is written).
    conn.pragma_update(None, "mmap_size", MMAP_SIZE)
        .map_err(sqlite)?;
    // One snapshot for every table: the intent slots, the rows and the events are judged as
    // of one moment, whatever the gateway writes (or retention removes) meanwhile.
    conn.execute_batch("BEGIN").map_err(sqlite)?;
    let mut sent = 0u64;
    let mut send = |mut m: Message| {
        if sent >= consumed.load(Ordering::Relaxed) + BACKLOG {
            m.hash();
        }
        sent += 1;
        tx.send(m)
            .map_err(|_| LedgerError::Corrupt("the store's checking side stopped".into()))
    };
    read_intents(&conn, &mut send)?;
    read_rows(&conn, &mut send)?;
    read_events(&conn, &mut send, spare)?;
    read_results(&conn, &mut send)
}

type Send<'a> = dyn FnMut(Message) -> Result<(), LedgerError> + 'a;

/// A column's text (as the ledger's own decoding reads it), or the error it gives.
fn text<'r>(
    row: &'r rusqlite::Row<'_>,
    names: &[String],
    i: usize,
) -> Result<Cow<'r, str>, LedgerError> {
    match row.get_ref(i) {
        Ok(ValueRef::Text(t)) => Ok(String::from_utf8_lossy(t)),
        _ => NamedRow { row, names }.text(&names[i]).map(Cow::Owned),
    }
}

fn int(row: &rusqlite::Row<'_>, names: &[String], i: usize) -> Result<i64, LedgerError> {
    match row.get_ref(i) {
        Ok(ValueRef::Integer(v)) => Ok(v),
        _ => NamedRow { row, names }.int(&names[i]),
    }
}

fn column_names(stmt: &rusqlite::Statement<'_>) -> Vec<String> {
    stmt.column_names().iter().map(|n| n.to_string()).collect()
}

/// Execution rows, their texts in one buffer.
#[derive(Default)]
struct RowBatch {
    text: String,
    rows: Vec<RowEntry>,
    /// Each row's record digest, once taken.
    digests: Option<Vec<[u8; 32]>>,
}

struct RowEntry {
    id: ExecutionId,
    events: u32,
    dispatches: u32,
    /// state, record, fingerprint, actor, tool
    texts: [Range<usize>; 5],
}

impl RowBatch {
    fn keep(&mut self, s: &str) -> Range<usize> {
        let start = self.text.len();
        self.text.push_str(s);
        start..self.text.len()
    }

    fn digest(&mut self) {
        let text = self.text.as_bytes();
        let digests = self.rows.iter().map(|r| sha256(&text[r.texts[1].clone()]));
        self.digests = Some(digests.collect());
    }

    fn apply(mut self, check: &mut RowCheck) {
        if self.digests.is_none() {
            self.digest();
        }
        let digests = self.digests.take().unwrap_or_default();
        for (r, digest) in self.rows.iter().zip(digests) {
            let [state, record, fingerprint, actor, tool] = r.texts.clone().map(|t| &self.text[t]);
            let row = ExecutionRow {
                id: r.id,
                state,
                events: r.events,
                dispatches: r.dispatches,
                record,
                fingerprint,
                actor,
                tool,
            };
            check.row_digested(&row, digest);
        }
    }
}

/// Every execution row, for [`RowCheck`] (read before the events: see its docs).
fn read_rows(conn: &rusqlite::Connection, send: &mut Send<'_>) -> Result<(), LedgerError> {
    let mut stmt = conn
        .prepare(
            "SELECT id, state, n, dispatches, record, fingerprint, actor, tool FROM executions",
        )
        .map_err(sqlite)?;
    let names = column_names(&stmt);
    let mut found = stmt.query([]).map_err(sqlite)?;
    let mut batch = RowBatch::default();
    while let Some(row) = found.next().map_err(sqlite)? {
        let Ok(id) = text(row, &names, 0)?.parse() else {
            continue; // not an execution id at all: the verifier's events say what is there
        };
        let count = |i| int(row, &names, i).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
        let state = text(row, &names, 1)?;
        let (events, dispatches) = (count(2)?, count(3)?);
        let texts = [
            state,
            text(row, &names, 4)?,
            text(row, &names, 5)?,
            text(row, &names, 6)?,
            text(row, &names, 7)?,
        ]
        .map(|t| batch.keep(&t));
        batch.rows.push(RowEntry {
            id,
            events,
            dispatches,
            texts,
        });
        if batch.rows.len() == CHUNK {
            send(Message::Rows(std::mem::take(&mut batch)))?;
        }
    }
    send(Message::Rows(batch))
}

/// Every intent slot, for [`RowCheck::intent`]. Read before the rows: a slot is written in
/// the transaction that writes its execution's row, so every slot read names a row the row
/// read then finds, however the store is written meanwhile.
fn read_intents(conn: &rusqlite::Connection, send: &mut Send<'_>) -> Result<(), LedgerError> {
    let mut stmt = conn
        .prepare("SELECT execution_id, actor, fingerprint FROM intents")
        .map_err(sqlite)?;
    let names = column_names(&stmt);
    let mut found = stmt.query([]).map_err(sqlite)?;
    let mut batch = Vec::new();
    while let Some(row) = found.next().map_err(sqlite)? {
        let slot = [0, 1, 2].map(|i| text(row, &names, i).map(Cow::into_owned));
        let [id, actor, fingerprint] = slot;
        batch.push([id?, actor?, fingerprint?]);
        if batch.len() == CHUNK {
            send(Message::Intents(std::mem::take(&mut batch)))?;
        }
    }
    send(Message::Intents(batch))
}

/// Every event in physical insertion order (rowid), so a moved row shows as a reorder.
fn read_events(
    conn: &rusqlite::Connection,
    send: &mut Send<'_>,
    spare: &Receiver<EventChunk>,
) -> Result<(), LedgerError> {
    let mut stmt = conn
        .prepare(&format!(
            "SELECT rowid AS pos, {} FROM events ORDER BY rowid",
            rows::EVENT_COLUMNS
        ))
        .map_err(sqlite)?;
    let names = column_names(&stmt);
    let mut found = stmt.query([]).map_err(sqlite)?;
    let mut chunk = EventChunk::with_capacity(CHUNK);
    while let Some(row) = found.next().map_err(sqlite)? {
        let pos: i64 = row.get(0).map_err(sqlite)?;
        let fast = event_columns(row).is_some_and(|c| chunk.push_columns(&c));
        if !fast {
            // Anything else is decoded as it always was, with the reasons it gave.
            match rows::event(&NamedRow { row, names: &names }) {
                Ok(e) => chunk.push_decoded(e),
                Err(e) => chunk.push_unreadable(pos, e.to_string()),
            }
        }
        if chunk.len() == CHUNK {
            let next = spare
                .try_recv()
                .unwrap_or_else(|_| EventChunk::with_capacity(CHUNK));
            let full = std::mem::replace(&mut chunk, next);
            send(Message::Events(full))?;
        }
    }
    send(Message::Events(chunk))
}

/// A row's columns (after `pos`, in `EVENT_COLUMNS` order) when each has its expected type.
fn event_columns<'r>(row: &'r rusqlite::Row<'_>) -> Option<EventColumns<'r>> {
    let text = |i| match row.get_ref(i).ok()? {
        ValueRef::Text(t) => std::str::from_utf8(t).ok(),
        _ => None,
    };
    let int = |i| match row.get_ref(i).ok()? {
        ValueRef::Integer(v) => Some(v),
        _ => None,
    };
    Some(EventColumns {
        chain: text(1)?,
        seq: int(2)?,
        execution_id: text(3)?,
        n: int(4)?,
        event: text(5)?,
        at: int(6)?,
        detail: text(7)?,
        prev_hash: text(8)?,
        hash: text(9)?,
    })
}

/// Stored results: each reference (`results/<execution>/<attempt>`) and its body's digest.
#[derive(Default)]
struct ResultBatch {
    text: String,
    results: Vec<(Range<usize>, [u8; 32])>,
}

impl ResultBatch {
    fn apply(self, check: &mut ResultCheck) {
        for (r, digest) in &self.results {
            check.stored_digest(&self.text[r.clone()], digest);
        }
    }
}

/// Every stored result body, digested here.
fn read_results(conn: &rusqlite::Connection, send: &mut Send<'_>) -> Result<(), LedgerError> {
    let mut stmt = conn
        .prepare("SELECT execution_id, attempt, body FROM results")
        .map_err(sqlite)?;
    let names = column_names(&stmt);
    let mut found = stmt.query([]).map_err(sqlite)?;
    let mut batch = ResultBatch::default();
    while let Some(row) = found.next().map_err(sqlite)? {
        let id = text(row, &names, 0)?;
        let attempt = int(row, &names, 1)?;
        let digest: [u8; 32] = match row.get_ref(2) {
            Ok(ValueRef::Blob(b)) => sha256(b),
            Ok(ValueRef::Text(t)) => sha256(String::from_utf8_lossy(t).as_bytes()),
            _ => sha256(&NamedRow { row, names: &names }.blob("body")?),
        };
        let start = batch.text.len();
        let _ = write!(batch.text, "results/{id}/{attempt}");
        batch.results.push((start..batch.text.len(), digest));
        if batch.results.len() == CHUNK {
            send(Message::Results(std::mem::take(&mut batch)))?;
        }
    }
    send(Message::Results(batch))
}

//! SQLite's write path: flat combining instead of a hand-off to a writer thread.
//!
//! A caller queues its op and, if no one else holds the connection, commits the queue itself
//! (its own op and whatever others queued meanwhile) on its own thread. Callers that find the
//! connection busy wait for their reply; the holder looks at the queue again after every
//! commit and before it lets go, so nothing queued is left behind. At concurrency 1 an
//! execution's two commits then cost no thread wake-up at all: on this kind of VM each
//! hand-off to and from a writer thread cost ~15–35 µs (see `docs/performance.md`). Under load
//! the queue still batches many ops into one commit.
//!
//! A caller's commit never waits for another process's lock (two gateways or a tool on one
//! file): it opens its transaction without patience, and a busy file sends the batch to the
//! combiner's thread, which waits for it. So a caller blocks its thread for one commit at most
//! and can always notice its client leaving.
//!
//! The thread also commits held deliveries when they fall due, takes over a queue a busy
//! combiner handed off, and commits what is held when the ledger closes.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::db::SqliteWriteConn;
use crate::ops::{Deferral, Op, LAZY_HOLD};
use crate::writer::Writer;

/// Commits a caller makes for others before it hands the rest of the queue to the thread, so a
/// caller's own answer never waits behind an unbounded stream of other requests.
const MAX_ROUNDS: usize = 2;

struct Connection {
    writer: Writer<SqliteWriteConn>,
    held: Deferral,
}

#[derive(Default)]
struct Signal {
    /// The thread should combine now (a caller could not, or handed work over).
    kicked: bool,
    /// When held ops fall due.
    due: Option<Instant>,
    closed: bool,
}

pub(crate) struct Combiner {
    patience: Duration,
    queue: Mutex<Vec<Op>>,
    connection: Mutex<Connection>,
    signal: Mutex<Signal>,
    wake: Condvar,
    /// The thread, for [`Combiner::stop`] to wait for.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock leaves nothing half-done in these structures that the next
    // holder cannot see: a half-open transaction fails the next `BEGIN` with a clear error.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs a writer future to completion. SQLite's connection is called directly, so these
/// futures never wait on anything; they are futures only because PostgreSQL's writer shares
/// the code.
fn complete<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

impl Combiner {
    /// Starts the combiner and its thread.
    /// `patience`: how long the thread waits for another process to release the file's write
    /// lock (two gateways, or a tool, on one file take turns) before the batch fails as busy.
    pub fn start(
        writer: Writer<SqliteWriteConn>,
        patience: Duration,
    ) -> std::io::Result<Arc<Combiner>> {
        let combiner = Arc::new(Combiner {
            patience,
            queue: Mutex::new(Vec::new()),
            connection: Mutex::new(Connection {
                writer,
                held: Deferral::default(),
            }),
            signal: Mutex::new(Signal::default()),
            wake: Condvar::new(),
            thread: Mutex::new(None),
        });
        let background = combiner.clone();
        let thread = std::thread::Builder::new()
            .name("postern-ledger-writer".into())
            .spawn(move || background.run_thread())?;
        *lock(&combiner.thread) = Some(thread);
        Ok(combiner)
    }

    /// Queues an op and, where the runtime allows, commits it on this thread.
    pub fn submit(&self, op: Op) {
        let lazy = op.can_wait();
        lock(&self.queue).push(op);
        if lazy {
            // Nothing waits on it: it rides the next urgent commit, or the thread's when due.
            self.arm(Some(Instant::now() + LAZY_HOLD));
            return;
        }
        // On the caller's thread, whatever runs it: the commit blocks for one fsync at most,
        // never for another process's lock (see `combine`). Measured cheaper than
        // `tokio::task::block_in_place`, which hands the worker's queue to another thread on
        // every call (`docs/performance.md`).
        self.combine(false, false);
    }

    /// Requests queued and not yet taken into a commit.
    pub fn queued(&self) -> usize {
        lock(&self.queue).len()
    }

    /// Tells the thread to commit what is held and stop.
    pub fn close(&self) {
        lock(&self.signal).closed = true;
        self.wake.notify_one();
    }

    /// Closes, and returns the thread to wait for: once it has ended and the last handle on
    /// the combiner is gone, the connection is closed (SQLite checkpoints and removes the WAL).
    pub fn stop(&self) -> Option<std::thread::JoinHandle<()>> {
        self.close();
        lock(&self.thread).take()
    }

    fn kick(&self) {
        lock(&self.signal).kicked = true;
        self.wake.notify_one();
    }

    /// Makes sure the thread wakes by `due`.
    fn arm(&self, due: Option<Instant>) {
        let Some(due) = due else { return };
        let mut signal = lock(&self.signal);
        if signal.due.is_none_or(|d| due < d) {
            signal.due = Some(due);
            drop(signal);
            self.wake.notify_one();
        }
    }

    /// Commits the queue. `wait`: block for the connection instead of leaving the queue to
    /// whoever holds it (the thread does; callers don't). `force`: commit held ops too.
    fn combine(&self, wait: bool, force: bool) {
        let mut rounds = 0;
        loop {
            let mut connection = if wait {
                lock(&self.connection)
            } else {
                match self.connection.try_lock() {
                    Ok(c) => c,
                    Err(TryLockError::Poisoned(p)) => p.into_inner(),
                    // Its holder looks at the queue again before letting go.
                    Err(TryLockError::WouldBlock) => return,
                }
            };
            let patience = if wait { self.patience } else { Duration::ZERO };
            if connection.writer.conn_mut().set_patience(patience).is_err() && !wait {
                drop(connection);
                self.kick();
                return;
            }
            let max_batch = connection.writer.max_batch();
            loop {
                let ops = std::mem::take(&mut *lock(&self.queue));
                let batch = connection.held.sort(ops, max_batch, force);
                if batch.is_empty() {
                    break;
                }
                let unbegun = if wait {
                    complete(connection.writer.commit_batch(batch));
                    None
                } else if complete(connection.writer.begin()).is_ok() {
                    // A batch that has to run again apart may find the lock taken meanwhile.
                    complete(connection.writer.commit_begun(batch))
                        .err()
                        .map(|(ops, _)| ops)
                } else {
                    Some(batch)
                };
                if let Some(batch) = unbegun {
                    // Another process holds the file's write lock. A caller never waits for it
                    // on its own thread (it could not notice its client leaving meanwhile):
                    // the batch goes back to the front of the queue, for the thread.
                    lock(&self.queue).splice(0..0, batch);
                    let due = connection.held.due_at();
                    drop(connection);
                    self.arm(due);
                    self.kick();
                    return;
                }
                rounds += 1;
                if !wait && rounds >= MAX_ROUNDS && !lock(&self.queue).is_empty() {
                    let due = connection.held.due_at();
                    drop(connection);
                    self.arm(due);
                    self.kick();
                    return;
                }
            }
            let due = connection.held.due_at();
            drop(connection);
            self.arm(due);
            if lock(&self.queue).is_empty() {
                return;
            }
        }
    }

    fn run_thread(&self) {
        let mut signal = lock(&self.signal);
        loop {
            if signal.closed {
                drop(signal);
                self.combine(true, true);
                return;
            }
            let now = Instant::now();
            let due = signal.due.is_some_and(|d| d <= now);
            if signal.kicked || due {
                signal.kicked = false;
                if due {
                    signal.due = None;
                }
                drop(signal);
                self.combine(true, due);
                signal = lock(&self.signal);
                continue;
            }
            signal = match signal.due {
                Some(d) => {
                    self.wake
                        .wait_timeout(signal, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.wake.wait(signal).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

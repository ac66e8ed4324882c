//! The streams this process carries in memory, each with its events, owner and watchers, and
//! the sweep that lets finished, idle and orphaned ones go.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postern_core::Timestamp;
use postern_ledger::StreamWrite;
use tokio::sync::mpsc;

use super::Replayed;

/// How long a finished stream that was cut (and so is in the ledger too) stays in memory for a
/// fast in-process replay; the ledger serves it after that.
const ABANDONED_IN_MEMORY: Duration = Duration::from_secs(60);
/// How long a finished stream that was written out whole stays resumable: long enough for a
/// client whose connection died with the last bytes still in flight, short enough that memory
/// stays bounded under load (a few seconds of calls).
const DELIVERED_IN_MEMORY: Duration = Duration::from_secs(5);
/// A stream with no event for this long leaves memory (a session's standalone stream).
const IDLE_IN_MEMORY: Duration = Duration::from_secs(600);
/// A request stream that never finished (its handler is gone) leaves memory after this long.
const ORPHANED_IN_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// One stream as this process carries it.
#[derive(Default)]
pub(super) struct LiveState {
    pub(super) events: Vec<(u64, Replayed)>,
    pub(super) next: u64,
    pub(super) finished: bool,
    pub(super) owner: Option<(Option<String>, String)>,
    pub(super) watchers: Vec<mpsc::UnboundedSender<Replayed>>,
    pub(super) touched: Option<Instant>,
    /// The client went away before the end: events are written to the ledger, in order,
    /// through this queue (one writer task per durable stream).
    pub(super) durable: Option<mpsc::UnboundedSender<StreamWrite>>,
    /// When each event was stored, by position (for its row, should the stream turn durable).
    pub(super) stored_at: Vec<Timestamp>,
}

/// Streams this process is carrying (or carried a moment ago). A sweep (at most every
/// `SWEEP_EVERY`) drops finished streams after their grace and idle ones.
#[derive(Default)]
pub(super) struct Live(Mutex<LiveMap>);

#[derive(Default)]
struct LiveMap {
    streams: HashMap<String, Arc<Mutex<LiveState>>>,
    swept: Option<Instant>,
}

const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl Live {
    fn lock(&self) -> std::sync::MutexGuard<'_, LiveMap> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn get(&self, stream_id: &str) -> Option<Arc<Mutex<LiveState>>> {
        self.lock().streams.get(stream_id).cloned()
    }

    pub(super) fn get_or_create(&self, stream_id: &str) -> Arc<Mutex<LiveState>> {
        let mut map = self.lock();
        if map.swept.is_none_or(|t| t.elapsed() > SWEEP_EVERY) {
            map.swept = Some(Instant::now());
            map.streams.retain(|_, s| {
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                let age = s.touched.map_or(Duration::ZERO, |t| t.elapsed());
                let gone = if s.finished {
                    age > if s.durable.is_some() {
                        ABANDONED_IN_MEMORY
                    } else {
                        DELIVERED_IN_MEMORY
                    }
                } else if s.owner.is_some() || s.durable.is_some() {
                    // A request still running (a long call): its numbering must go on.
                    age > ORPHANED_IN_MEMORY
                } else {
                    // A session's standalone stream, idle.
                    age > IDLE_IN_MEMORY
                };
                !gone
            });
            metrics::gauge!(postern_pipeline::telemetry::STREAMS_LIVE)
                .set(map.streams.len() as f64);
        }
        map.streams
            .entry(stream_id.to_string())
            .or_insert_with(|| {
                Arc::new(Mutex::new(LiveState {
                    touched: Some(Instant::now()),
                    ..LiveState::default()
                }))
            })
            .clone()
    }
}

//! The per-actor bound on open SSE streams (`max_streams_per_actor`). A standalone `GET`
//! stream is idle by nature (it carries only what the server may send on its own), so at the
//! cap the actor's oldest idle stream is ended to make room; a request's stream (an answer on
//! its way, or its replay) is never ended, and only when every stream is one is the request
//! refused.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::{Limit, Refusal};

type ByActor = Arc<Mutex<HashMap<String, ActorStreams>>>;

/// `per_actor` stream slots for each actor.
pub(crate) struct StreamSlots {
    per_actor: usize,
    by_actor: ByActor,
    ids: AtomicU64,
}

#[derive(Default)]
struct ActorStreams {
    /// Slots held (idle streams included).
    open: usize,
    /// The idle streams, oldest first, each with the token that ends it.
    idle: BTreeMap<u64, CancellationToken>,
}

impl StreamSlots {
    pub(super) fn new(per_actor: usize) -> StreamSlots {
        StreamSlots {
            per_actor,
            by_actor: Arc::default(),
            ids: AtomicU64::new(0),
        }
    }

    /// A slot for a stream of `actor` (`idle`: a standalone `GET` stream). At the cap the
    /// actor's oldest idle stream is ended and its slot passes to this one; with none idle, the
    /// refusal.
    pub(crate) fn try_acquire(&self, actor: &str, idle: bool) -> Result<StreamPermit, Refusal> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let mut map = self.by_actor.lock().unwrap_or_else(|e| e.into_inner());
        let streams = map.entry(actor.to_string()).or_default();
        if streams.open >= self.per_actor {
            let (_, oldest) = streams
                .idle
                .pop_first()
                .ok_or_else(|| Refusal::over(Limit::Streams, actor, self.per_actor))?;
            oldest.cancel();
            streams.open -= 1;
            metrics::counter!(postern_pipeline::telemetry::STREAM_EVICTIONS).increment(1);
        }
        streams.open += 1;
        let ended = idle.then(CancellationToken::new);
        if let Some(token) = &ended {
            streams.idle.insert(id, token.clone());
        }
        Ok(StreamPermit {
            by_actor: self.by_actor.clone(),
            actor: actor.to_string(),
            id,
            ended,
        })
    }
}

/// A stream slot, given back when dropped (unless the stream was ended to make room, which
/// gave its slot away already).
pub(crate) struct StreamPermit {
    by_actor: ByActor,
    actor: String,
    id: u64,
    ended: Option<CancellationToken>,
}

impl StreamPermit {
    /// For an idle stream: cancelled when it must end to make room.
    pub(crate) fn ended(&self) -> Option<CancellationToken> {
        self.ended.clone()
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut map = self.by_actor.lock().unwrap_or_else(|e| e.into_inner());
        let Some(streams) = map.get_mut(&self.actor) else {
            return;
        };
        let counted = self.ended.is_none() || streams.idle.remove(&self.id).is_some();
        if counted {
            streams.open = streams.open.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_stream_makes_room_and_a_request_stream_never_does() {
        let slots = StreamSlots::new(2);
        let old = slots.try_acquire("a", true).unwrap();
        let newer = slots.try_acquire("a", true).unwrap();
        let request = slots.try_acquire("a", false).unwrap();
        assert!(
            old.ended().unwrap().is_cancelled(),
            "the oldest idle one ended"
        );
        assert!(!newer.ended().unwrap().is_cancelled());
        drop(old); // gave its slot away already: nothing comes back
        let second_request = slots.try_acquire("a", false).unwrap();
        assert!(newer.ended().unwrap().is_cancelled());
        let refused = slots.try_acquire("a", true).err().unwrap();
        assert!(matches!(
            refused,
            Refusal::Over {
                limit: Limit::Streams,
                value: 2,
                ..
            }
        ));
        let _other = slots
            .try_acquire("b", false)
            .expect("another actor has its own");
        drop(request);
        let _again = slots.try_acquire("a", false).expect("given back");
        drop(second_request);
    }
}

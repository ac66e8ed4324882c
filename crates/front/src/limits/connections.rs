//! The per-actor bound on connections and request bodies in flight
//! (`max_connections_per_actor`, issue 49). A review held every connection of the gateway with
//! one agent token: 1,280 `POST`s that each sent a byte every 3 s. The bound is checked as soon
//! as a request's credentials are read, before its body, so one actor's connections cannot
//! crowd out another's.
//!
//! A connection is its actor's from the first request that claims it ([`Seat::claim`]). At the
//! cap, a new connection of the actor's closes the actor's idlest connection (no request in
//! flight for [`IDLE_BEFORE_GIVING_WAY`] at least, longest so); only when none is is the request
//! refused (429) and its own connection closed. A connection just answered is not closed: its
//! client may be sending its next request on it, and a request sent into a closing connection
//! is lost to the client (the gateway-load benchmark's pooled clients met exactly that). Bodies
//! being read are counted too (an HTTP/2 connection carries many), and are never given up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::listener::seat::IDLE_BEFORE_GIVING_WAY;
use crate::listener::Seat;

use super::{Limit, Refusal};

type ByActor = Arc<Mutex<HashMap<String, ActorConnections>>>;

/// Connections and bodies in flight, per actor.
pub(crate) struct ConnectionSlots {
    per_actor: usize,
    by_actor: ByActor,
}

#[derive(Default)]
struct ActorConnections {
    /// The actor's connections (those that closed, or are closing, are dropped as they are met).
    seats: Vec<Weak<Seat>>,
    /// Request bodies being read.
    bodies: usize,
}

/// A request body counted against its actor until it has been read.
pub(crate) struct BodyPermit {
    by_actor: ByActor,
    actor: String,
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        let mut map = lock(&self.by_actor);
        if let Some(held) = map.get_mut(&self.actor) {
            held.bodies = held.bodies.saturating_sub(1);
            if held.bodies == 0 && held.seats.is_empty() {
                map.remove(&self.actor);
            }
        }
    }
}

impl ConnectionSlots {
    pub(super) fn new(per_actor: usize) -> ConnectionSlots {
        ConnectionSlots {
            per_actor,
            by_actor: Arc::default(),
        }
    }

    /// Counts a request of `actor`'s, about to have its body read, on `seat` (its connection;
    /// `None` outside the listener). The request's connection, if no one's yet, becomes the
    /// actor's, closing the actor's idlest one at the cap.
    pub(crate) fn admit(
        &self,
        seat: Option<&Arc<Seat>>,
        actor: &str,
    ) -> Result<BodyPermit, Refusal> {
        // Seats met are dropped after the lock is released (dropping one may end its connection).
        let mut met: Vec<Arc<Seat>> = Vec::new();
        let mut map = lock(&self.by_actor);
        let held = map.entry(actor.to_string()).or_default();
        if held.bodies >= self.per_actor {
            return Err(Refusal::over(Limit::Connections, actor, self.per_actor));
        }
        if let Some(seat) = seat.filter(|s| s.owner().is_none()) {
            held.seats.retain(|weak| match weak.upgrade() {
                Some(open) if !open.is_closing() => {
                    met.push(open);
                    true
                }
                _ => false,
            });
            if held.seats.len() >= self.per_actor {
                let idlest = met
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.idle_since().map(|since| (since, i)))
                    .filter(|(since, _)| since.elapsed() >= IDLE_BEFORE_GIVING_WAY)
                    .min();
                let Some((_, i)) = idlest else {
                    return Err(Refusal::over(Limit::Connections, actor, self.per_actor));
                };
                met[i].close();
                held.seats.remove(i);
                tracing::debug!(
                    actor,
                    "an idle connection was closed at max_connections_per_actor"
                );
            }
            if seat.claim(actor) {
                held.seats.push(Arc::downgrade(seat));
            }
        }
        held.bodies += 1;
        Ok(BodyPermit {
            by_actor: self.by_actor.clone(),
            actor: actor.to_string(),
        })
    }
}

fn lock(by_actor: &ByActor) -> std::sync::MutexGuard<'_, HashMap<String, ActorConnections>> {
    by_actor.lock().unwrap_or_else(|e| e.into_inner())
}

//! One accepted connection as the caps see it (issues 33 and 49): the slots it holds (its
//! source address's and the gateway's), whether a request on it has authenticated, the actor
//! that claimed it, and the means to close or end it.
//!
//! Every request carries its connection's seat (an `Arc<Seat>` extension): the listener judges
//! the request against it ([`Seat::judge`]) and the front claims the connection for its actor
//! (`max_connections_per_actor`). A seat whose connection has not authenticated, or was refused at
//! its actor's cap before any request on it was admitted, can be given up to a newer connection at
//! its address's cap or the gateway's ([`Standing`], [`super::lineup`]); one an actor claimed (a
//! request on it was admitted) is never taken, so a flood of anonymous connections (from an agent's own address: a NAT, a
//! load balancer without the PROXY protocol; or from many) and an actor reopening connections
//! over its own cap do not lock another agent out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::activity::Activity;
use super::probation::{Verdict, Vouch};
use super::Peer;

/// How long a connection must have had no request in flight before it is given up to make room
/// at a cap, when it has authenticated (the per-actor cap's idlest, and at the address's or the
/// gateway's cap one no actor claimed).
pub const IDLE_BEFORE_GIVING_WAY: Duration = Duration::from_secs(2);

/// Where a connection stands in its lineup ([`super::lineup`]) at a cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Standing {
    /// It gives way to a new connection: no request on it has authenticated, or one was
    /// refused at its actor's cap before any was admitted.
    Yields,
    /// It gives way only when nothing else does: it authenticated, no actor claimed it (a
    /// `/healthz` or a refused request with a valid token, an operator's request) and it has
    /// been idle for [`IDLE_BEFORE_GIVING_WAY`].
    YieldsWhenIdle,
    /// It stays for now (authenticated and busy or just used, not claimed).
    Stays,
    /// It never gives way any more: an actor claimed it (a request on it was admitted), or
    /// it gave its slots up.
    Out,
}

/// What a served connection holds until it closes, or gives up to a connection that displaces
/// it: its source address's slot and one of the gateway's.
/// The two slots are held, never read: dropping them gives them back.
pub struct Slots {
    /// Its source address's slot (`addresses::AddressSlot`), held only for its drop: a seat
    /// does not know the address table, which knows its seats.
    pub(super) _address: Box<dyn Send + Sync>,
    pub(super) _gateway: OwnedSemaphorePermit,
    /// The gateway slot is one of those kept for agents: the connection is on probation until
    /// a request on it authenticates ([`super::probation`]).
    pub(super) kept: bool,
}

impl Slots {
    /// `address` with a gateway slot of a semaphore of its own (the listener's unit tests).
    #[cfg(test)]
    pub(super) fn alone(address: impl Send + Sync + 'static, kept: bool) -> Slots {
        let gateway = Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .expect("a free permit");
        Slots {
            _address: Box::new(address),
            _gateway: gateway,
            kept,
        }
    }
}

/// One accepted connection.
pub struct Seat {
    activity: Arc<Activity>,
    slots: Mutex<Option<Slots>>,
    /// `None`: no authentication is asked of it (a connection served outside the listener).
    vouch: Option<Vouch>,
    vouched: AtomicBool,
    /// A request on it was refused at its actor's cap: it closes, and gives way unless a
    /// request on it was admitted.
    refused: AtomicBool,
    /// The gateway's `max_connections`, for the words of a refusal on a kept slot.
    max_connections: usize,
    /// Ends the connection at once (it was given up).
    cut: CancellationToken,
    /// The actor whose connection this is: the first to claim it.
    owner: OnceLock<String>,
}

impl Seat {
    pub(super) fn new(
        accepted_at: Instant,
        slots: Option<Slots>,
        vouch: Option<Vouch>,
        max_connections: usize,
    ) -> Arc<Seat> {
        Arc::new(Seat {
            activity: Arc::new(Activity::new(accepted_at)),
            slots: Mutex::new(slots),
            vouch,
            vouched: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            max_connections,
            cut: CancellationToken::new(),
            owner: OnceLock::new(),
        })
    }

    /// A connection no cap counts (served directly, as in the listener's own tests).
    pub fn uncounted(accepted_at: Instant) -> Arc<Seat> {
        Seat::new(accepted_at, None, None, 0)
    }

    /// What a request on this connection gets: a connection whose request authenticates is
    /// served from then on; an anonymous one too, unless it holds a slot kept for agents.
    pub fn judge<B>(&self, request: &http::Request<B>, peer: &Peer) -> Verdict {
        if self.is_vouched() {
            return Verdict::Serve;
        }
        if self
            .vouch
            .as_ref()
            .is_some_and(|vouch| vouch(request.headers(), peer))
        {
            self.vouched.store(true, Ordering::Release);
            return Verdict::Serve;
        }
        if !self.lock().as_ref().is_some_and(|s| s.kept) {
            return Verdict::Serve;
        }
        match request.uri().path() {
            "/healthz" => Verdict::ServeThenClose,
            _ => Verdict::Refuse,
        }
    }

    /// A request on it has authenticated.
    pub fn is_vouched(&self) -> bool {
        self.vouched.load(Ordering::Acquire)
    }

    /// A request on it was refused at its actor's cap (`max_connections_per_actor`): it is
    /// closed once its requests in flight are answered, and, unless a request on it was
    /// admitted (an actor claimed it), it gives way at a cap ([`super::lineup`]), its
    /// refusal's answer then lost with it.
    pub fn refuse(&self) {
        self.refused.store(true, Ordering::Release);
        self.close();
    }

    /// A request on it authenticated in a way the listener's [`Vouch`] cannot tell at once
    /// (an issuer's token verified by a round trip): the front says so.
    pub fn authenticated(&self) {
        self.vouched.store(true, Ordering::Release);
    }

    /// Where it stands at a cap.
    pub(super) fn standing(&self) -> Standing {
        if self.owner().is_some() || self.cut.is_cancelled() {
            Standing::Out
        } else if !self.is_vouched() || self.refused.load(Ordering::Acquire) {
            Standing::Yields
        } else if self
            .idle_since()
            .is_some_and(|since| since.elapsed() >= IDLE_BEFORE_GIVING_WAY)
        {
            Standing::YieldsWhenIdle
        } else {
            Standing::Stays
        }
    }

    /// The gateway's `max_connections`.
    pub(super) fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// Hands its slots to a connection that displaces it, and ends it, if it still stands as
    /// `standing` (read under the lock a claim takes, so a request admitted meanwhile keeps its
    /// connection); `None` when it no longer does, or has given them up already.
    pub(super) fn give_up_standing(&self, standing: Standing) -> Option<Slots> {
        let mut slots = self.lock();
        if self.standing() != standing {
            return None;
        }
        let taken = slots.take();
        if taken.is_some() {
            self.cut.cancel();
        }
        taken
    }

    /// Cancelled when the connection is to end at once.
    pub(super) fn cut(&self) -> &CancellationToken {
        &self.cut
    }

    pub(super) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// Makes the connection `actor`'s unless another actor's already: whether it is `actor`'s.
    pub fn claim(&self, actor: &str) -> bool {
        // Under the slots' lock: a claim and a give-up at a cap do not interleave.
        let _slots = self.lock();
        self.owner.get_or_init(|| actor.to_string()) == actor
    }

    /// The actor that claimed it.
    pub fn owner(&self) -> Option<&str> {
        self.owner.get().map(String::as_str)
    }

    /// Since when it has had no request in flight; `None` while one is.
    pub fn idle_since(&self) -> Option<Instant> {
        self.activity.idle_since()
    }

    /// Closes it once its requests in flight are answered (an idle HTTP/1.1 connection at once,
    /// HTTP/2 with `GOAWAY`).
    pub fn close(&self) {
        self.activity.ask_close();
    }

    /// It has been asked to close, or ended.
    pub fn is_closing(&self) -> bool {
        self.cut.is_cancelled() || self.activity.close_asked()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Slots>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A seat holding `address` and a gateway slot of its own, judged on one request: it has
/// authenticated or not (the listener's unit tests).
#[cfg(test)]
pub(super) fn judged(address: impl Send + Sync + 'static, vouched: bool) -> Arc<Seat> {
    let vouch: Vouch = Arc::new(move |_, _| vouched);
    let seat = Seat::new(
        Instant::now(),
        Some(Slots::alone(address, false)),
        Some(vouch),
        8,
    );
    let request = http::Request::builder().uri("/mcp").body(()).unwrap();
    seat.judge(&request, &Peer::default());
    seat
}

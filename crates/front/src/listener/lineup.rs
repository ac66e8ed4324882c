//! Served connections in the order they were accepted, and which of them gives way at a cap
//! ([`Standing`]): the oldest on which no request has authenticated, or that was refused at its
//! actor's cap (`max_connections_per_actor`) before any request on it was admitted (it is being
//! closed anyway); when none is, the oldest that authenticated but was never claimed by an actor
//! (a `/healthz` with a token, an operator's request) and has been idle for
//! [`super::seat::IDLE_BEFORE_GIVING_WAY`], so that one token cannot hold the gateway with
//! connections its actor's cap never counts. A connection an actor has claimed (a request on it
//! was admitted) is never taken, and leaves the lineup for good. The listener keeps one lineup
//! per source address ([`super::addresses`]) and one for the whole gateway ([`super::Gate`]).
//!
//! A connection met as claimed, ended or given up is dropped, so a scan passes over each of
//! those once; connections that authenticated and were not claimed are met at every scan until
//! they end, so a refusal at a cap costs up to one look at each of them.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use super::seat::{Seat, Slots, Standing};

#[derive(Default)]
pub(super) struct Lineup {
    seats: VecDeque<Weak<Seat>>,
    /// How many were left when the lineup was last swept: it is swept again when it has grown
    /// to twice that (so each push costs O(1) on average).
    left_at_last_sweep: usize,
}

impl Lineup {
    /// Adds a served connection at the back; the seats met while dropping the ones that can
    /// no longer give way are put in `met` (to be dropped outside the caller's lock: the last
    /// reference to a seat drops its slots, which may take that lock).
    pub fn push(&mut self, seat: &Arc<Seat>, met: &mut Vec<Arc<Seat>>) {
        self.seats.push_back(Arc::downgrade(seat));
        if self.seats.len() > 2 * self.left_at_last_sweep + 8 {
            self.seats.retain(|weak| match weak.upgrade() {
                Some(seat) => {
                    let keep = seat.standing() != Standing::Out;
                    met.push(seat);
                    keep
                }
                None => false,
            });
            self.left_at_last_sweep = self.seats.len();
        }
    }

    /// Takes the slots of the oldest connection that gives way ([`Standing::Yields`]), else of
    /// the oldest idle one no actor claimed ([`Standing::YieldsWhenIdle`]), ending it; `None`
    /// when none does. Seats met are put in `met`, as for [`Lineup::push`].
    pub fn give_way(&mut self, met: &mut Vec<Arc<Seat>>) -> Option<Slots> {
        // Connections that may yet give way are passed over (`at` counts them) and kept.
        let mut at = 0;
        let mut idle = None;
        while let Some(weak) = self.seats.get(at) {
            let Some(seat) = weak.upgrade() else {
                self.seats.remove(at);
                continue;
            };
            let standing = seat.standing();
            match standing {
                Standing::Yields => {
                    // None: claimed or given up elsewhere since its standing was read.
                    if let Some(slots) = seat.give_up_standing(standing) {
                        self.seats.remove(at);
                        met.push(seat);
                        return Some(slots);
                    }
                    continue;
                }
                Standing::Out => {
                    self.seats.remove(at);
                }
                Standing::YieldsWhenIdle | Standing::Stays => {
                    if standing == Standing::YieldsWhenIdle && idle.is_none() {
                        idle = Some(seat.clone());
                    }
                    at += 1;
                }
            }
            met.push(seat);
        }
        // Left in line, it is swept once it ends.
        idle.and_then(|seat| seat.give_up_standing(Standing::YieldsWhenIdle))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.seats.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(vouched: bool) -> Arc<Seat> {
        super::super::seat::judged((), vouched)
    }

    fn given_up(seat: &Seat) -> bool {
        seat.cut().is_cancelled()
    }

    #[tokio::test]
    async fn the_oldest_that_gives_way_goes_never_an_admitted_one() {
        let mut lineup = Lineup::default();
        let mut met = Vec::new();
        let operator = seat(true);
        let claimed = seat(true);
        let first_anonymous = seat(false);
        let over_its_cap = seat(true);
        let claimed_then_refused = seat(true);
        let second_anonymous = seat(false);
        for s in [
            &operator,
            &claimed,
            &first_anonymous,
            &over_its_cap,
            &claimed_then_refused,
            &second_anonymous,
        ] {
            lineup.push(s, &mut met);
        }
        assert!(claimed.claim("billing") && claimed_then_refused.claim("ops"));
        over_its_cap.refuse();
        // A refusal on a connection that served an admitted request (HTTP/2's second
        // stream, a keep-alive's next request) only closes it after its requests in flight.
        claimed_then_refused.refuse();
        for next in [&first_anonymous, &over_its_cap, &second_anonymous] {
            assert!(lineup.give_way(&mut met).is_some());
            assert!(given_up(next));
        }
        assert!(
            lineup.give_way(&mut met).is_none(),
            "the operator's connection was just used"
        );
        for kept in [&operator, &claimed, &claimed_then_refused] {
            assert!(!given_up(kept), "an authenticated connection is not taken");
        }
        assert_eq!(
            lineup.len(),
            1,
            "only the operator's may yet give way (it is not claimed)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unclaimed_authenticated_connection_gives_way_once_idle_and_after_anonymous_ones() {
        use super::super::seat::IDLE_BEFORE_GIVING_WAY;
        let mut lineup = Lineup::default();
        let mut met = Vec::new();
        // A token's `/healthz`: authenticated, never claimed by its actor's cap.
        let healthz_with_token = seat(true);
        let claimed = seat(true);
        assert!(claimed.claim("billing"));
        lineup.push(&healthz_with_token, &mut met);
        lineup.push(&claimed, &mut met);
        assert!(lineup.give_way(&mut met).is_none(), "not idle long enough");
        tokio::time::advance(IDLE_BEFORE_GIVING_WAY).await;
        let anonymous = seat(false);
        lineup.push(&anonymous, &mut met);
        assert!(lineup.give_way(&mut met).is_some());
        assert!(given_up(&anonymous), "an anonymous one first, though newer");
        assert!(lineup.give_way(&mut met).is_some());
        assert!(given_up(&healthz_with_token), "then the idle unclaimed one");
        assert!(lineup.give_way(&mut met).is_none());
        assert!(!given_up(&claimed), "a claimed one never, however idle");
    }

    #[tokio::test]
    async fn ended_claimed_and_given_up_connections_leave_the_line() {
        let mut lineup = Lineup::default();
        let mut met = Vec::new();
        let agent = seat(true);
        lineup.push(&agent, &mut met);
        for _ in 0..100 {
            let ended = seat(false);
            lineup.push(&ended, &mut met);
            met.clear();
        }
        assert!(lineup.len() <= 11, "swept as it grows: {}", lineup.len());
        // One given up elsewhere (its address's lineup) and one ended are passed over: the
        // anonymous one behind them gives way.
        let elsewhere = seat(false);
        let ended = seat(false);
        let behind = seat(false);
        for s in [&elsewhere, &ended, &behind] {
            lineup.push(s, &mut met);
        }
        met.clear();
        drop(ended);
        assert!(elsewhere.give_up_standing(Standing::Yields).is_some());
        assert!(agent.claim("billing"));
        assert!(lineup.give_way(&mut met).is_some());
        assert!(given_up(&behind) && !given_up(&agent));
        assert_eq!(
            lineup.len(),
            0,
            "claimed, given up, ended: none left in line"
        );
    }
}

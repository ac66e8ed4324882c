//! Served connections in the order they were accepted, and which of them gives way at a cap:
//! the oldest that has not authenticated, or whose first request was refused at its actor's cap
//! (`max_connections_per_actor`: it is being closed anyway). A connection an actor has claimed
//! (a request on it authenticated and was admitted) is never taken, and leaves the lineup for
//! good. The listener keeps one lineup per source address ([`super::addresses`]) and one for
//! the whole gateway ([`super::Gate`]).
//!
//! A cap's refusal costs O(1) on average: a connection met once as claimed, ended or given up
//! is dropped, so a scan passes over each of those once; only connections that authenticated
//! and are not yet claimed (an operator's, or one between its request's authentication and its
//! admission) are met again.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use super::seat::{Seat, Slots};

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
                    let keep = !seat.is_out_of_line();
                    met.push(seat);
                    keep
                }
                None => false,
            });
            self.left_at_last_sweep = self.seats.len();
        }
    }

    /// Takes the slots of the oldest connection that gives way, ending it; `None` when none
    /// does. Seats met are put in `met`, as for [`Lineup::push`].
    pub fn give_way(&mut self, met: &mut Vec<Arc<Seat>>) -> Option<Slots> {
        // Connections that may yet give way are passed over (`at` counts them) and kept.
        let mut at = 0;
        while let Some(weak) = self.seats.get(at) {
            let Some(seat) = weak.upgrade() else {
                self.seats.remove(at);
                continue;
            };
            if seat.gives_way() {
                self.seats.remove(at);
                let slots = seat.give_up();
                met.push(seat);
                // None: given up to another lineup's newcomer meanwhile; look on.
                if slots.is_some() {
                    return slots;
                }
                continue;
            }
            if seat.is_out_of_line() {
                self.seats.remove(at);
            } else {
                at += 1;
            }
            met.push(seat);
        }
        None
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
        assert!(lineup.give_way(&mut met).is_none());
        for kept in [&operator, &claimed, &claimed_then_refused] {
            assert!(
                !given_up(kept),
                "an authenticated connection is never taken"
            );
        }
        assert_eq!(
            lineup.len(),
            1,
            "only the operator's may yet give way (it is not claimed)"
        );
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
        // One given up elsewhere (its address's lineup) is passed over, not handed out twice.
        let elsewhere = seat(false);
        lineup.push(&elsewhere, &mut met);
        assert!(elsewhere.give_up().is_some());
        assert!(agent.claim("billing"));
        assert!(lineup.give_way(&mut met).is_none());
        assert_eq!(lineup.len(), 0);
    }
}

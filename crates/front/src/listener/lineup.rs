//! Served connections in the order they were accepted, and which of them gives way at a cap:
//! one whose request was refused at its actor's cap (`max_connections_per_actor`: it is being
//! closed anyway), else the oldest on which no request has authenticated. A connection on which
//! a request authenticated and was served is never taken. The listener keeps one lineup per
//! source address ([`super::addresses`]) and one for the whole gateway ([`super::Gate`]).

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use super::seat::{Seat, Slots};

#[derive(Default)]
pub(super) struct Lineup {
    seats: VecDeque<Weak<Seat>>,
    /// How many were open when ended ones were last dropped: they are dropped again when the
    /// lineup has grown to twice that (so each push costs O(1) on average).
    open_at_last_sweep: usize,
}

impl Lineup {
    /// Adds a served connection at the back; the seats met while dropping ended ones are put
    /// in `met` (to be dropped outside the caller's lock: the last reference to a seat drops
    /// its slots, which may take that lock).
    pub fn push(&mut self, seat: &Arc<Seat>, met: &mut Vec<Arc<Seat>>) {
        self.seats.push_back(Arc::downgrade(seat));
        if self.seats.len() > 2 * self.open_at_last_sweep + 8 {
            let _ = self.sweep(met);
        }
    }

    /// Takes the slots of the connection that gives way first, ending it; `None` when every
    /// open connection authenticated and was not refused.
    pub fn give_way(&mut self, met: &mut Vec<Arc<Seat>>) -> Option<Slots> {
        loop {
            let open = self.sweep(met);
            let refused = open.iter().position(|s| s.is_refused());
            let at = refused.or_else(|| open.iter().position(|s| !s.is_vouched()))?;
            let slots = open[at].give_up();
            self.seats.remove(at);
            // None: given up to another lineup's newcomer since the sweep; look again.
            if slots.is_some() {
                return slots;
            }
        }
    }

    /// Drops the ended connections; the open ones are added to `met`, in order, and returned.
    fn sweep<'m>(&mut self, met: &'m mut Vec<Arc<Seat>>) -> &'m [Arc<Seat>] {
        let from = met.len();
        self.seats.retain(|weak| match weak.upgrade() {
            Some(seat) if !seat.is_given_up() => {
                met.push(seat);
                true
            }
            _ => false,
        });
        self.open_at_last_sweep = self.seats.len();
        &met[from..]
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

    #[tokio::test]
    async fn a_refused_connection_gives_way_first_then_the_oldest_anonymous_never_an_agents() {
        let mut lineup = Lineup::default();
        let mut met = Vec::new();
        let (agent, first_anonymous, over_its_cap, second_anonymous) =
            (seat(true), seat(false), seat(true), seat(false));
        for s in [&agent, &first_anonymous, &over_its_cap, &second_anonymous] {
            lineup.push(s, &mut met);
        }
        over_its_cap.refuse();
        assert!(lineup.give_way(&mut met).is_some());
        assert!(
            over_its_cap.is_given_up(),
            "refused at its actor's cap: first"
        );
        assert!(!first_anonymous.is_given_up());
        assert!(lineup.give_way(&mut met).is_some());
        assert!(
            first_anonymous.is_given_up(),
            "then the oldest anonymous one"
        );
        assert!(lineup.give_way(&mut met).is_some());
        assert!(second_anonymous.is_given_up());
        assert!(
            lineup.give_way(&mut met).is_none(),
            "an authenticated connection being served is never taken"
        );
        assert!(!agent.is_given_up());
    }

    #[tokio::test]
    async fn ended_and_given_up_connections_are_forgotten() {
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
        assert!(lineup.give_way(&mut met).is_none());
        assert_eq!(lineup.len(), 1, "only the agent's is left");
    }
}

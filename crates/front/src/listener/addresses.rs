//! Open connections counted per source address (`[gateway] max_connections_per_address`), so
//! that one client cannot take the whole of `max_connections` (issue 33): a review held 1,030
//! idle connections from one address and every other client got 503.
//!
//! An IPv6 client is counted by its /64, the block one subscriber (or one cloud VM) is usually
//! given whole; counting each /128 would let it open as many addresses as it likes. An
//! IPv4-mapped IPv6 address (a dual-stack listener) is its IPv4 address.
//!
//! A cap never locks out an agent that shares its address with a flood (issue 49: a NAT, or
//! anonymous connections from the agent's own host): at the cap, a new connection displaces the
//! oldest connection of its address that gives way ([`super::lineup`]), and is itself served
//! ([`Admission::Displace`]). Only when none of the address's connections gives way is a new one
//! refused. A flood thus only churns its own connections; an agent's new connection can still
//! be given up before its first request's headers arrive, once every connection in line before
//! it has been (its client connects again).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use super::lineup::Lineup;
use super::seat::{Seat, Slots};

/// Connections over an address's cap answered `503` at once, per address: the rest are closed
/// unanswered, so one address cannot take every one of the listener's refusals.
pub const REFUSALS_PER_ADDRESS: usize = 4;

/// What an accepted connection may do, as far as its source address's count goes.
pub enum Admission {
    /// Under the cap: served, counted until the slot is dropped.
    Serve(AddressSlot),
    /// At the cap: served on the slots of the address's connection that gave way,
    /// which has been ended.
    Displace(Slots),
    /// Over the cap: answered `503`, counted (as a refusal) until the slot is dropped.
    Refuse(AddressSlot),
    /// Over the cap with [`REFUSALS_PER_ADDRESS`] refusals of its own in progress: closed.
    Close,
}

/// The open connections of each source address.
#[derive(Clone, Default)]
pub struct Addresses(Arc<Mutex<HashMap<IpAddr, Count>>>);

#[derive(Default)]
struct Count {
    served: usize,
    refused: usize,
    /// The address's served connections, in the order they were accepted.
    seats: Lineup,
}

impl Addresses {
    /// Counts a new connection from `peer`, under `cap` served connections per address.
    pub fn admit(&self, peer: IpAddr, cap: usize) -> Admission {
        let key = source(peer);
        // Seats met here are dropped after the lock is released: the last reference to an
        // ended connection's seat drops its address slot, which takes this lock.
        let mut met = Vec::new();
        let mut map = self.lock();
        let count = map.entry(key).or_default();
        let refusal = if count.served < cap {
            count.served += 1;
            false
        } else if let Some(slots) = count.seats.give_way(&mut met) {
            return Admission::Displace(slots);
        } else if count.refused < REFUSALS_PER_ADDRESS {
            count.refused += 1;
            true
        } else {
            return Admission::Close;
        };
        let slot = AddressSlot {
            addresses: self.clone(),
            key,
            refusal,
        };
        match refusal {
            false => Admission::Serve(slot),
            true => Admission::Refuse(slot),
        }
    }

    /// Remembers a served connection of `peer`'s, to be displaced while it gives way
    /// ([`Lineup`]).
    pub fn seated(&self, peer: IpAddr, seat: &Arc<Seat>) {
        let mut met = Vec::new();
        let mut map = self.lock();
        if let Some(count) = map.get_mut(&source(peer)) {
            count.seats.push(seat, &mut met);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Count>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.lock().len()
    }
}

/// One connection counted against its source address until dropped; an address with nothing
/// counted is forgotten, so the map holds only addresses with connections open.
pub struct AddressSlot {
    addresses: Addresses,
    key: IpAddr,
    refusal: bool,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut map = self.addresses.lock();
        if let Some(count) = map.get_mut(&self.key) {
            match self.refusal {
                true => count.refused = count.refused.saturating_sub(1),
                false => count.served = count.served.saturating_sub(1),
            }
            if count.served == 0 && count.refused == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// The address a connection is counted under.
fn source(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_over_its_cap_is_refused_a_few_times_then_closed() {
        let a = Addresses::default();
        let served: Vec<_> = (0..2)
            .map(|_| match a.admit(ip("127.0.0.1"), 2) {
                Admission::Serve(slot) => slot,
                _ => panic!("under the cap"),
            })
            .collect();
        let refused: Vec<_> = (0..REFUSALS_PER_ADDRESS)
            .map(|_| match a.admit(ip("127.0.0.1"), 2) {
                Admission::Refuse(slot) => slot,
                _ => panic!("answered 503"),
            })
            .collect();
        assert!(matches!(a.admit(ip("127.0.0.1"), 2), Admission::Close));
        assert!(
            matches!(a.admit(ip("127.0.0.2"), 2), Admission::Serve(_)),
            "another address is not affected"
        );
        drop(refused);
        assert!(matches!(a.admit(ip("127.0.0.1"), 2), Admission::Refuse(_)));
        drop(served);
        assert!(matches!(a.admit(ip("127.0.0.1"), 2), Admission::Serve(_)));
        assert_eq!(a.tracked(), 0, "nothing open, nothing kept");
    }

    fn seat(slot: AddressSlot, vouched: bool) -> Arc<Seat> {
        super::super::seat::judged(slot, vouched)
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_unauthenticated_connection_gives_way() {
        let a = Addresses::default();
        let peer = ip("127.0.0.1");
        let mut seats = Vec::new();
        for vouched in [true, false, false] {
            let Admission::Serve(slot) = a.admit(peer, 3) else {
                panic!("under the cap")
            };
            let s = seat(slot, vouched);
            a.seated(peer, &s);
            seats.push(s);
        }
        // The first is an agent's: passed over. The second, the oldest anonymous, gives way.
        let Admission::Displace(slots) = a.admit(peer, 3) else {
            panic!("displaces")
        };
        assert!(seats[1].cut().is_cancelled() && !seats[0].cut().is_cancelled());
        let newest = Seat::new(tokio::time::Instant::now(), Some(slots), None, 8);
        a.seated(peer, &newest);
        let Admission::Displace(held) = a.admit(peer, 3) else {
            panic!("displaces")
        };
        assert!(seats[2].cut().is_cancelled());
        // Left: the agent's and `newest`, which has not authenticated: it gives way next; then
        // nothing is left to take, and a new connection is refused.
        let Admission::Displace(held_too) = a.admit(peer, 3) else {
            panic!("displaces")
        };
        assert!(newest.cut().is_cancelled());
        assert!(matches!(a.admit(peer, 3), Admission::Refuse(_)));
        drop((held, held_too));
        assert!(
            !seats[0].cut().is_cancelled(),
            "an authenticated connection is never taken"
        );
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64_and_a_mapped_ipv4_as_ipv4() {
        assert_eq!(source(ip("2001:db8:1:2:aa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            source(ip("2001:db8:1:2:ffff::9")),
            source(ip("2001:db8:1:2::1"))
        );
        assert_ne!(source(ip("2001:db8:1:3::1")), source(ip("2001:db8:1:2::1")));
        assert_eq!(source(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(source(ip("10.0.0.7")), ip("10.0.0.7"));
    }
}

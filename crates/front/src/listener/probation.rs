//! Connection slots kept for agents (issue 33): a quarter of `max_connections`
//! ([`kept_for_agents`]) is not open to anonymous clients, so clients that never authenticate,
//! from however many addresses, cannot take every slot.
//!
//! A connection accepted into that reserve is on probation: the first request it sends must
//! authenticate ([`Vouch`]: a valid actor token or client certificate, as `/mcp` checks them, or
//! an operator token); from then on it is served like any other. A request on probation that
//! does not authenticate is answered `503` (`/healthz` is answered as usual, for a load balancer
//! that probes a full gateway) and the connection is closed after it, so an anonymous client
//! holds a kept slot for at most one request.

use std::sync::Arc;

use super::Peer;

/// Whether a request's credentials prove an actor or an operator (never which one, nor why not).
pub type Vouch = Arc<dyn Fn(&http::HeaderMap, &Peer) -> bool + Send + Sync>;

/// The connections of `max_connections` that only authenticated requests may use.
pub fn kept_for_agents(max_connections: usize) -> usize {
    max_connections / 4
}

/// What a request gets from its connection's seat ([`super::seat::Seat::judge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Serve,
    /// Served, and the connection closed after it.
    ServeThenClose,
    /// Answered `503`, and the connection closed after it.
    Refuse,
}

#[cfg(test)]
mod tests {
    use super::super::addresses::{Addresses, Admission};
    use super::super::seat::{Seat, Slots};
    use super::*;

    fn request(path: &str, token: Option<&str>) -> http::Request<()> {
        let mut r = http::Request::builder().uri(path);
        if let Some(t) = token {
            r = r.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        r.body(()).unwrap()
    }

    fn kept_seat(vouch: &Vouch, addresses: &Addresses) -> Arc<Seat> {
        let Admission::Serve(address) = addresses.admit("127.0.0.1".parse().unwrap(), 8) else {
            panic!("under the cap")
        };
        let slots = Slots::alone(address, true);
        Seat::new(
            tokio::time::Instant::now(),
            Some(slots),
            Some(vouch.clone()),
            8,
        )
    }

    #[tokio::test]
    async fn a_kept_slot_serves_an_authenticated_connection_and_one_anonymous_request() {
        let vouch: Vouch = Arc::new(|h, _| {
            h.get(http::header::AUTHORIZATION)
                .is_some_and(|v| v == "Bearer good")
        });
        let peer = Peer::default();
        let addresses = Addresses::default();
        let anonymous = kept_seat(&vouch, &addresses);
        assert_eq!(
            anonymous.judge(&request("/mcp", None), &peer),
            Verdict::Refuse
        );
        assert_eq!(
            anonymous.judge(&request("/mcp", Some("bad")), &peer),
            Verdict::Refuse
        );
        assert_eq!(
            anonymous.judge(&request("/healthz", None), &peer),
            Verdict::ServeThenClose
        );
        assert!(!anonymous.is_vouched());
        let agent = kept_seat(&vouch, &addresses);
        assert_eq!(
            agent.judge(&request("/mcp", Some("good")), &peer),
            Verdict::Serve
        );
        assert_eq!(
            agent.judge(&request("/mcp", None), &peer),
            Verdict::Serve,
            "vouched once, the connection is the agent's"
        );
        assert!(agent.is_vouched());
        assert_eq!(kept_for_agents(1024), 256);
        assert_eq!(kept_for_agents(2), 0, "too few to keep any");
    }
}

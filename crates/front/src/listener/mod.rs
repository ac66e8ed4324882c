//! The front's HTTP listener (issue 12, bounds): accepts TCP connections and serves each with
//! hyper ([`serve_connection`]), with a cap on open connections, another per source address
//! (issue 33), a first-byte deadline, a header-read and an idle timeout per connection, and a
//! graceful stop.
//!
//! A connection over either cap is answered `503` with `Retry-After` and closed, not left in the
//! kernel's backlog: a client (or a load balancer, or whoever probes `/healthz`) learns at once
//! that the gateway is full instead of hanging on a connect that may time out, and no client
//! waits behind connections an attacker holds open. The refusal's cost is bounded: at most
//! [`REFUSALS_AT_ONCE`] at a time ([`addresses::REFUSALS_PER_ADDRESS`] per address), each
//! within the first-byte and header-read timeouts; beyond that a connection is closed unanswered.
//!
//! The per-address cap is what keeps one client from taking every slot: it is counted before
//! anything is read, so it holds against clients that never send a byte, and whoever sends one
//! must do so within `first_byte_timeout` (shorter than the header-read timeout, which still runs
//! from the accept and bounds a client that trickles its headers). A quarter of
//! `max_connections` is kept for connections whose first request authenticates
//! ([`probation`]), so anonymous clients from many addresses cannot take every slot either.
//! At its address's cap, and at the gateway's, a new connection displaces the oldest connection
//! that gives way ([`lineup`]: one on which no request has authenticated, or that was refused
//! at its actor's cap before any request on it was admitted; failing those, one that
//! authenticated, was never claimed by an actor and is idle): an agent behind the same NAT as
//! a flood is still served, and neither a flood from many addresses nor an actor reopening
//! connections over its own cap locks another agent out. When none gives way, a new
//! connection is refused.
//!
//! Connections from `[gateway] trusted_proxies` start with a PROXY protocol header (v1 or v2,
//! [`proxy`]): the client address it carries is the one counted, logged and recorded; a PROXY
//! header from any other address is refused. Every request carries its connection's [`Seat`],
//! which the front claims for the request's actor (`max_connections_per_actor`), and its body
//! must arrive at a minimum rate ([`pace`]).

mod activity;
mod addresses;
mod connection;
mod lineup;
pub mod pace;
pub mod probation;
pub mod proxy;
pub mod seat;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use postern_core::config::GatewaySettings;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use addresses::{Addresses, Admission};
pub use connection::{serve_connection, Timeouts};
use lineup::Lineup;
pub use pace::Pace;
use probation::kept_for_agents;
pub use probation::Vouch;
pub use proxy::TrustedProxies;
pub use seat::Seat;
use seat::Slots;

/// Connections over the cap being answered `503` at once; more are closed unanswered.
pub const REFUSALS_AT_ONCE: usize = 64;

/// The listener's bounds, from `[gateway]`.
#[derive(Clone, Debug)]
pub struct ListenerLimits {
    pub timeouts: Timeouts,
    /// Open connections (the ones being refused not counted).
    pub max_connections: usize,
    /// Open connections from one source address (an IPv6 client's /64).
    pub max_connections_per_address: usize,
    /// From the accept to the connection's first byte (a TLS client's hello included).
    pub first_byte: Duration,
    /// The load balancers whose connections start with a PROXY header.
    pub proxies: TrustedProxies,
}

impl ListenerLimits {
    pub fn of(settings: &GatewaySettings) -> ListenerLimits {
        ListenerLimits {
            timeouts: Timeouts {
                header_read: settings.header_read_timeout,
                idle: settings.idle_timeout,
                body: Pace {
                    grace: settings.body_read_timeout,
                    min_rate: settings.min_body_rate,
                },
            },
            max_connections: usize::try_from(settings.max_connections).unwrap_or(usize::MAX),
            max_connections_per_address: usize::try_from(settings.max_connections_per_address)
                .unwrap_or(usize::MAX),
            first_byte: settings.first_byte_timeout,
            proxies: TrustedProxies::new(&settings.trusted_proxies),
        }
    }
}

/// Turns an accepted TCP connection into the stream HTTP is spoken over, and says who is at the
/// other end: the TCP stream itself for plain HTTP ([`PlainTcp`]), a TLS session for
/// [`tls::TlsHandshake`]. It runs under the header-read timeout of the request it precedes.
pub trait Handshake: Clone + Send + Sync + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    fn handshake(
        &self,
        tcp: TcpStream,
    ) -> impl Future<Output = io::Result<(Self::Io, Peer)>> + Send;
}

/// What the handshake proved about the client; every request of the connection carries it as
/// an extension, for the front's authentication.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// The fingerprint of the client certificate the client proved it holds the key of.
    pub client_certificate: Option<postern_core::config::CertificateFingerprint>,
    /// The client's address: the TCP peer's, or the one a trusted proxy's PROXY header names.
    pub address: Option<IpAddr>,
}

/// Plain HTTP: no handshake.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainTcp;

impl Handshake for PlainTcp {
    type Io = TcpStream;

    fn handshake(
        &self,
        tcp: TcpStream,
    ) -> impl Future<Output = io::Result<(TcpStream, Peer)>> + Send {
        std::future::ready(Ok((tcp, Peer::default())))
    }
}

/// Serves `app` on `listener` until `stop` completes (`vouch` tells whether a request on a kept
/// slot authenticates); then stops accepting, asks every
/// connection to close once its requests in flight are answered (HTTP/1.1 closes, HTTP/2 sends
/// `GOAWAY`), and returns when all have closed. Open SSE streams are not requests that finish:
/// the caller ends them through the router's cancellation token when `stop` fires.
pub async fn serve<H: Handshake>(
    listener: TcpListener,
    handshake: H,
    app: Router,
    limits: ListenerLimits,
    vouch: Vouch,
    stop: impl Future<Output = ()>,
) {
    let stopping = CancellationToken::new();
    let connections = TaskTracker::new();
    let kept = kept_for_agents(limits.max_connections);
    let gate = Arc::new(Gate {
        slots: Arc::new(Semaphore::new(limits.max_connections - kept)),
        kept: Arc::new(Semaphore::new(kept)),
        refusals: Arc::new(Semaphore::new(REFUSALS_AT_ONCE)),
        addresses: Addresses::default(),
        lineup: Mutex::default(),
        limits,
    });
    let mut stop = pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    pause_after_accept_error(e).await;
                    continue;
                }
            },
        };
        let accepted_at = Instant::now();
        // rmcp answers a call as an SSE stream whose result is a second small write; without
        // TCP_NODELAY, Nagle holds that write for the client's delayed ACK (~40 ms per call,
        // measured by `bench/gateway-load`).
        let _ = tcp.set_nodelay(true);
        let accepted = Accepted {
            gate: gate.clone(),
            handshake: handshake.clone(),
            app: app.clone(),
            vouch: vouch.clone(),
            stopping: stopping.clone(),
            accepted_at,
        };
        if gate.limits.proxies.trusts(peer.ip()) {
            // The client's address is in the PROXY header: read in the connection's own task,
            // then counted under it.
            connections.spawn(accepted.behind_proxy(tcp, peer.ip()));
            continue;
        }
        let Some((tcp, slots)) = gate.admit(tcp, peer.ip(), &handshake) else {
            continue;
        };
        // Seated before the next accept, so that at a cap the next one finds it in line.
        let seat = accepted.seat(peer.ip(), slots);
        connections.spawn(accepted.serve(tcp, peer.ip(), seat));
    }
    drop(listener);
    stopping.cancel();
    connections.close();
    connections.wait().await;
}

/// An accepted connection and what serving it takes.
struct Accepted<H> {
    gate: Arc<Gate>,
    handshake: H,
    app: Router,
    vouch: Vouch,
    stopping: CancellationToken,
    accepted_at: Instant,
}

impl<H: Handshake> Accepted<H> {
    /// A connection from a trusted proxy: its PROXY header first, then the gate under the
    /// client's address; one without a valid header is closed.
    async fn behind_proxy(self, mut tcp: TcpStream, proxy: IpAddr) {
        let within = self.gate.limits.first_byte;
        let client = match proxy::client_address(&mut tcp, proxy, within).await {
            Ok(client) => client,
            Err(why) => {
                tracing::info!(%proxy, reason = %why, "a connection from a trusted proxy is closed: it did not start with a PROXY header");
                return;
            }
        };
        if let Some((tcp, slots)) = self.gate.admit(tcp, client, &self.handshake) {
            let seat = self.seat(client, slots);
            self.serve(tcp, client, seat).await;
        }
    }

    /// The connection's seat, holding `slots`, in its address's lineup and the gateway's.
    fn seat(&self, client: IpAddr, slots: Slots) -> Arc<Seat> {
        let max_connections = self.gate.limits.max_connections;
        let seat = Seat::new(
            self.accepted_at,
            Some(slots),
            Some(self.vouch.clone()),
            max_connections,
        );
        self.gate.addresses.seated(client, &seat);
        self.gate.seated(&seat);
        seat
    }

    /// Serves a connection counted under `client`'s address, until it closes or its seat is
    /// given up to a newer connection.
    async fn serve(self, tcp: TcpStream, client: IpAddr, seat: Arc<Seat>) {
        let cut = seat.cut().clone();
        tokio::select! {
            () = cut.cancelled() => {}
            () = self.serve_seated(tcp, client, seat) => {}
        }
    }

    async fn serve_seated(self, tcp: TcpStream, client: IpAddr, seat: Arc<Seat>) {
        let limits = &self.gate.limits;
        if !first_byte(&tcp, limits.first_byte).await {
            return;
        }
        if proxy::starts_with_header(&tcp).await {
            // Only a trusted proxy's header (read and consumed before this) says who the
            // client is: a client must not choose the address it is counted under.
            tracing::info!(
                %client,
                "a PROXY header from an address not in [gateway] trusted_proxies: closed"
            );
            return;
        }
        let first_headers_due = self.accepted_at + limits.timeouts.header_read;
        let Ok(Ok((io, mut peer))) =
            tokio::time::timeout_at(first_headers_due, self.handshake.handshake(tcp)).await
        else {
            return;
        };
        peer.address = Some(client);
        serve_connection(io, peer, self.app, limits.timeouts, seat, self.stopping).await;
    }
}

/// A failed accept: one connection's trouble (reset before accept) is skipped; anything else
/// (out of file descriptors) is reported and retried after a second, rather than spinning.
async fn pause_after_accept_error(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(error = %e, "accepting a connection failed; trying again in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// The listener's counts: open connections, refusals being answered, connections per address.
struct Gate {
    /// Open to any connection.
    slots: Arc<Semaphore>,
    /// Kept for connections whose first request authenticates ([`probation`]).
    kept: Arc<Semaphore>,
    refusals: Arc<Semaphore>,
    addresses: Addresses,
    /// Every served connection, for the one that gives way at the gateway's cap.
    lineup: Mutex<Lineup>,
    limits: ListenerLimits,
}

impl Gate {
    /// Counts an accepted connection against its source address and the gateway's cap: the
    /// slots to serve it with, or `None` when it was refused (answered `503` in the background,
    /// or closed). At its address's cap, or the gateway's, it may take over the slots of a
    /// connection that gives way ([`lineup`]).
    fn admit<H: Handshake>(
        &self,
        tcp: TcpStream,
        peer: IpAddr,
        handshake: &H,
    ) -> Option<(TcpStream, Slots)> {
        let per_address = self.limits.max_connections_per_address;
        let address = match self.addresses.admit(peer, per_address) {
            Admission::Serve(slot) => slot,
            Admission::Displace(slots) => {
                tracing::debug!(client = %peer, "at its address's cap, a new connection displaced one of the address's that gave way");
                return Some((tcp, slots));
            }
            Admission::Refuse(slot) => {
                self.refuse(tcp, handshake, Full::Address(per_address), Some(slot));
                return None;
            }
            Admission::Close => return None,
        };
        let gateway = match self.slots.clone().try_acquire_owned() {
            Ok(open) => Some((open, false)),
            Err(_) => self
                .kept
                .clone()
                .try_acquire_owned()
                .ok()
                .map(|k| (k, true)),
        };
        let Some((gateway, kept)) = gateway.or_else(|| self.displaced(peer)) else {
            let full = Full::Gateway(self.limits.max_connections);
            self.refuse(tcp, handshake, full, None);
            return None;
        };
        let slots = Slots {
            _address: Box::new(address),
            _gateway: gateway,
            kept,
        };
        Some((tcp, slots))
    }

    /// At the gateway's cap: the gateway slot of the connection that gives way ([`Lineup`]),
    /// which is ended, and whether it is one kept for agents.
    fn displaced(&self, peer: IpAddr) -> Option<(OwnedSemaphorePermit, bool)> {
        let mut met = Vec::new();
        let given_up = self.lineup().give_way(&mut met)?;
        tracing::debug!(client = %peer, "at the gateway's cap, a new connection displaced one that gave way");
        // Its address slot is dropped here, outside the lineup's lock.
        Some((given_up._gateway, given_up.kept))
    }

    /// Remembers a served connection, to be displaced at the gateway's cap while it gives way.
    fn seated(&self, seat: &Arc<Seat>) {
        let mut met = Vec::new();
        self.lineup().push(seat, &mut met);
    }

    fn lineup(&self) -> std::sync::MutexGuard<'_, Lineup> {
        self.lineup.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers a connection over a cap with `503` (in the background, bounded), or closes it
    /// unanswered when [`REFUSALS_AT_ONCE`] are being answered already. `address_slot` keeps
    /// the refusal counted against its source address until it is over.
    fn refuse<H: Handshake>(
        &self,
        tcp: TcpStream,
        handshake: &H,
        full: Full,
        address_slot: Option<addresses::AddressSlot>,
    ) {
        let Ok(permit) = self.refusals.clone().try_acquire_owned() else {
            return;
        };
        let (handshake, limits) = (handshake.clone(), self.limits.clone());
        tokio::spawn(async move {
            let _held = (permit, address_slot);
            if !first_byte(&tcp, limits.first_byte).await {
                return;
            }
            let _ = tokio::time::timeout(limits.timeouts.header_read, async {
                let (io, _peer) = handshake.handshake(tcp).await?;
                answer_full(io, full).await;
                Ok::<_, io::Error>(())
            })
            .await;
        });
    }
}

/// Waits (at most `within`) for the client's first byte, left unread for the handshake and
/// hyper; false when none came (timed out, closed, or failed).
async fn first_byte(tcp: &TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, tcp.peek(&mut byte)).await,
        Ok(Ok(1..))
    )
}

/// Which cap a refused connection is over, and its value.
#[derive(Clone, Copy, Debug)]
enum Full {
    Gateway(usize),
    Address(usize),
    /// Only the slots kept for agents are left (of this many connections).
    Kept(usize),
}

/// Answers the request on `io` with `503 Service Unavailable` and `Retry-After`, then closes.
async fn answer_full<I>(io: I, full: Full)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let answered = Arc::new(Notify::new());
    let service = {
        let answered = answered.clone();
        hyper::service::service_fn(move |_request: hyper::Request<Incoming>| {
            answered.notify_one();
            std::future::ready(Ok::<_, Infallible>(full_response(full)))
        })
    };
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().keep_alive(false);
    let mut connection = pin!(builder.serve_connection(TokioIo::new(io), service));
    tokio::select! {
        _ = connection.as_mut() => return,
        () = answered.notified() => connection.as_mut().graceful_shutdown(),
    }
    let _ = connection.await;
}

fn full_response(full: Full) -> hyper::Response<Body> {
    let what = match full {
        Full::Kept(n) => format!("the gateway's connections for unauthenticated requests are all taken; {} of its {n} ([gateway] max_connections) are kept for requests with a valid token, and this connection closes", kept_for_agents(n)),
        Full::Gateway(n) => format!("the gateway has {n} connections open, its limit ([gateway] max_connections)"),
        Full::Address(n) => format!("your address has {n} connections open, its limit ([gateway] max_connections_per_address)"),
    };
    let mut response = hyper::Response::new(Body::from(format!(
        "{what}: nothing was recorded or sent; connect again after Retry-After\n"
    )));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

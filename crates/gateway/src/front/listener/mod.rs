//! The front's HTTP listener (issue 12, bounds): accepts TCP connections and serves each with
//! hyper ([`serve_connection`]), with a cap on open connections, a header-read and an idle
//! timeout per connection, and a graceful stop.
//!
//! A connection over the cap is answered `503` with `Retry-After` and closed, not left in the
//! kernel's backlog: a client (or a load balancer, or whoever probes `/healthz`) learns at once
//! that the gateway is full instead of hanging on a connect that may time out, and no client
//! waits behind connections an attacker holds open. The refusal's cost is bounded: at most
//! [`REFUSALS_AT_ONCE`] at a time, each within the header-read timeout; beyond that a connection
//! is closed unanswered.

mod connection;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use postern_core::config::GatewaySettings;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use connection::{serve_connection, Timeouts};

/// Connections over the cap being answered `503` at once; more are closed unanswered.
pub const REFUSALS_AT_ONCE: usize = 64;

/// The listener's bounds, from `[gateway]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    pub timeouts: Timeouts,
    /// Open connections (the ones being refused not counted).
    pub max_connections: usize,
}

impl ListenerLimits {
    pub fn of(settings: &GatewaySettings) -> ListenerLimits {
        ListenerLimits {
            timeouts: Timeouts {
                header_read: settings.header_read_timeout,
                idle: settings.idle_timeout,
            },
            max_connections: usize::try_from(settings.max_connections).unwrap_or(usize::MAX),
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

/// Serves `app` on `listener` until `stop` completes; then stops accepting, asks every
/// connection to close once its requests in flight are answered (HTTP/1.1 closes, HTTP/2 sends
/// `GOAWAY`), and returns when all have closed. Open SSE streams are not requests that finish:
/// the caller ends them through the router's cancellation token when `stop` fires.
pub async fn serve<H: Handshake>(
    listener: TcpListener,
    handshake: H,
    app: Router,
    limits: ListenerLimits,
    stop: impl Future<Output = ()>,
) {
    let stopping = CancellationToken::new();
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let mut stop = pin!(stop);
    loop {
        let tcp = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => tcp,
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refuse(tcp, handshake.clone(), &refusals, limits);
            continue;
        };
        let (handshake, app, stopping) = (handshake.clone(), app.clone(), stopping.clone());
        connections.spawn(async move {
            let _slot = slot;
            let first_headers_due = accepted_at + limits.timeouts.header_read;
            let Ok(Ok((io, peer))) =
                tokio::time::timeout_at(first_headers_due, handshake.handshake(tcp)).await
            else {
                return;
            };
            serve_connection(io, peer, app, limits.timeouts, accepted_at, stopping).await;
        });
    }
    drop(listener);
    stopping.cancel();
    connections.close();
    connections.wait().await;
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

/// Answers a connection over the cap with `503` (in the background, bounded), or closes it
/// unanswered when [`REFUSALS_AT_ONCE`] are being answered already.
fn refuse<H: Handshake>(
    tcp: TcpStream,
    handshake: H,
    refusals: &Arc<Semaphore>,
    limits: ListenerLimits,
) {
    let Ok(permit) = refusals.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let _ = tokio::time::timeout(limits.timeouts.header_read, async {
            let (io, _peer) = handshake.handshake(tcp).await?;
            answer_full(io, limits.max_connections).await;
            Ok::<_, io::Error>(())
        })
        .await;
    });
}

/// Answers the request on `io` with `503 Service Unavailable` and `Retry-After`, then closes.
async fn answer_full<I>(io: I, max_connections: usize)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let answered = Arc::new(Notify::new());
    let service = {
        let answered = answered.clone();
        hyper::service::service_fn(move |_request: hyper::Request<Incoming>| {
            answered.notify_one();
            std::future::ready(Ok::<_, Infallible>(full_response(max_connections)))
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

fn full_response(max_connections: usize) -> hyper::Response<Body> {
    let mut response = hyper::Response::new(Body::from(format!(
        "the gateway has {max_connections} connections open, its limit ([gateway] \
         max_connections): nothing was recorded or sent; connect again after Retry-After\n"
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

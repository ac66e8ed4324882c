//! The hyper clients the channel sends through: one per (connect timeout, TLS profile), each
//! with its own connection pool, built on first use and kept.
//!
//! Connection reuse (see docs/performance.md for the measurement that decided it): an idle
//! connection is kept for [`POOL_IDLE_TIMEOUT`] and reused. Reuse cannot make a request that
//! may have reached the target look unsent, because of how hyper hands a request back:
//! * a pooled connection already closed by the target is noticed (hyper's connection task reads
//!   the close while it idles) and never checked out;
//! * a request hyper had not started writing when its connection failed is given back and
//!   re-sent on a new connection (`retry_canceled_requests`): no byte of it left before;
//! * once hyper has started writing a request, a failure is returned as it is: the channel
//!   then says `Unknown` (a connection failure after it was established), never `NotSent`.
//!
//! The window between the target closing an idle connection and the channel writing on it is
//! the only way reuse can turn a request into an `Unknown` that a fresh connection would have
//! answered; the idle timeout is kept below the shortest keep-alive of common servers (5 s)
//! so that a target does not close a connection the channel still considers reusable.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use crate::http::tls::TlsProfile;

/// How long an idle connection is kept for reuse: below the 5 s keep-alive of Node.js and
/// Apache, the shortest of common servers.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// A client of the channel: HTTP/1.1, plain or over rustls, no proxy, no redirects.
pub(crate) type HyperClient = Client<TimedConnector, Full<Bytes>>;

/// Whether connections are kept and reused between requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionReuse {
    /// Keep idle connections for [`POOL_IDLE_TIMEOUT`] (the default).
    Pooled,
    /// A new connection (and TLS handshake) for every request: for measuring what reuse saves.
    FreshEveryRequest,
}

/// The clients built so far, by connect timeout and TLS profile.
#[derive(Debug)]
pub(crate) struct Clients {
    reuse: ConnectionReuse,
    built: Mutex<HashMap<(Duration, u64), HyperClient>>,
}

impl Clients {
    pub(crate) fn new(reuse: ConnectionReuse) -> Clients {
        Clients {
            reuse,
            built: Mutex::new(HashMap::new()),
        }
    }

    /// The client for this connect timeout and profile (built and kept on first use).
    pub(crate) fn get(&self, connect_timeout: Duration, tls: &TlsProfile) -> HyperClient {
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        built
            .entry((connect_timeout, tls.id()))
            .or_insert_with(|| build(connect_timeout, tls, self.reuse))
            .clone()
    }
}

fn build(connect_timeout: Duration, tls: &TlsProfile, reuse: ConnectionReuse) -> HyperClient {
    let mut tcp = HttpConnector::new();
    // https URLs go through the TLS layer below; this connector only opens the TCP stream.
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    // Built from the config as it is (hyper-rustls' builder would clear its ALPN list).
    let https = HttpsConnector::from((tcp, tls.rustls_config()));
    let connector = TimedConnector {
        inner: https,
        timeout: connect_timeout,
    };
    let idle_per_host = match reuse {
        ConnectionReuse::Pooled => usize::MAX,
        ConnectionReuse::FreshEveryRequest => 0,
    };
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(idle_per_host)
        // Re-sends only a request hyper never started writing (its connection was found closed
        // first): safe, and what keeps reuse from failing requests that were never sent.
        .retry_canceled_requests(true)
        .build(connector)
}

/// The TCP connect and the TLS handshake, bounded together by the tool's connect timeout:
/// until both are done no byte of the request has been written.
#[derive(Clone, Debug)]
pub(crate) struct TimedConnector {
    inner: HttpsConnector<HttpConnector>,
    timeout: Duration,
}

/// The connect timeout fired (TCP connect or TLS handshake unfinished).
#[derive(Debug)]
pub(crate) struct ConnectTimedOut(pub Duration);

impl fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no connection (TCP and TLS handshake) within {:?}",
            self.0
        )
    }
}

impl StdError for ConnectTimedOut {}

type BoxError = Box<dyn StdError + Send + Sync>;
type Connecting = Pin<
    Box<
        dyn Future<Output = Result<MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>, BoxError>>
            + Send,
    >,
>;

impl tower_service::Service<Uri> for TimedConnector {
    type Response = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(Box::new(ConnectTimedOut(timeout)) as BoxError),
            }
        })
    }
}

//! One HTTP connection, served by hyper in whichever of HTTP/1.1 and HTTP/2 the client speaks,
//! over any byte stream (TCP, or TLS over it), under two timers:
//!
//! * **header read**: a client has `header_read` to send a request's headers, counted from the
//!   connection's accept and, on a kept-alive HTTP/1.1 connection, from the first byte of each
//!   later request. A client that trickles its headers (slowloris) is disconnected.
//! * **idle**: a connection with no request in flight is closed after `idle` (HTTP/1.1 at
//!   once, HTTP/2 with `GOAWAY`).
//!
//! Why not hyper's own `header_read_timeout`: hyper starts that timer whenever it waits for a
//! request head, idle time included, so it would close every kept-alive HTTP/1.1 connection
//! `header_read` after its last answer, well before a client's pool gives it up (90 s for
//! reqwest and hyper's client); a request sent as the server closes is lost to the client, and a
//! `POST` is not retried. It also does not cover the HTTP/1-or-2 sniff hyper-util does first.
//! A request in flight (its response still being written, an SSE stream above all) is never cut
//! by either timer.

use std::convert::Infallible;
use std::io;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::activity::{Activity, Expiry, Timers};
use super::pace::{Pace, Paced};
use super::probation::Verdict;
use super::seat::Seat;

/// The timers of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From accept, or from a later request's first byte, to the end of its headers.
    pub header_read: Duration,
    /// With no request in flight, before a kept-alive connection is closed.
    pub idle: Duration,
    /// How fast a request's body must arrive.
    pub body: Pace,
}

impl From<Timeouts> for Timers {
    fn from(t: Timeouts) -> Timers {
        Timers {
            header_read: t.header_read,
            idle: t.idle,
        }
    }
}

/// Serves `app` on one accepted connection until the client closes it, a timer closes it, its
/// seat is given up, or `stopping` is cancelled (then requests in flight finish and the
/// connection closes). The seat's accept time starts the first request's header-read timer, so
/// a TLS handshake done before this call counts against it. Each request is judged against the
/// seat (a kept slot asks it to authenticate: see [`super::probation`]) and carries it.
pub async fn serve_connection<I>(
    io: I,
    peer: super::Peer,
    app: Router,
    timeouts: Timeouts,
    seat: Arc<Seat>,
    stopping: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = seat.activity().clone();
    let cut = seat.cut().clone();
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            let in_flight = InFlight::start(&activity, request.version());
            let verdict = seat.judge(&request, &peer);
            if verdict != Verdict::Serve {
                activity.ask_close();
            }
            request.extensions_mut().insert(peer);
            request.extensions_mut().insert(seat.clone());
            let of = seat.max_connections();
            let request = request.map(|body| Paced::body(body, timeouts.body, &seat));
            let app = app.clone();
            async move {
                let response = match verdict {
                    Verdict::Refuse => super::full_response(super::Full::Kept(of)),
                    _ => app.oneshot(request).await?,
                };
                Ok::<_, Infallible>(response.map(|body| {
                    Body::new(CountedBody {
                        inner: body,
                        _in_flight: in_flight,
                    })
                }))
            }
        })
    };
    let watched = Watched {
        inner: io,
        activity: activity.clone(),
    };
    let builder = Builder::new(TokioExecutor::new());
    let mut connection = pin!(builder.serve_connection(TokioIo::new(watched), service));
    let mut stop_asked = false;
    loop {
        let deadline = activity.deadline(timeouts);
        tokio::select! {
            _ = connection.as_mut() => return,
            () = cut.cancelled() => return,
            () = stopping.cancelled(), if !stop_asked => {
                stop_asked = true;
                connection.as_mut().graceful_shutdown();
            }
            () = activity.changed.notified() => {
                if !stop_asked && activity.lock().close_asked {
                    stop_asked = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
            () = sleep_until(deadline) => match activity.expired(timeouts, Instant::now()) {
                Some(Expiry::Cut) => return,
                Some(Expiry::Close) => {
                    activity.closing(Instant::now());
                    connection.as_mut().graceful_shutdown();
                }
                None => {}
            },
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<(Instant, Expiry)>) {
    match deadline {
        Some((at, _)) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One request, counted from the call of the service until its response body has been written
/// out or dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>, version: http::Version) -> InFlight {
        activity.request_started(version);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// A response body that keeps its request counted in flight until hyper drops it.
struct CountedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for CountedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The connection's byte stream, telling [`Activity`] when bytes arrive.
struct Watched<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.bytes_read();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACE: Pace = Pace {
        grace: Duration::from_secs(10),
        min_rate: 1024,
    };

    const T: Timeouts = Timeouts {
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(120),
        body: PACE,
    };

    #[tokio::test]
    async fn a_new_connection_has_the_header_read_time_for_its_first_request() {
        let start = Instant::now();
        let a = Activity::new(start);
        assert_eq!(a.deadline(T), Some((start + T.header_read, Expiry::Cut)));
        a.bytes_read();
        assert_eq!(
            a.deadline(T),
            Some((start + T.header_read, Expiry::Cut)),
            "bytes do not restart the first request's clock"
        );
    }

    #[tokio::test]
    async fn no_timer_runs_while_a_request_is_in_flight() {
        let a = Arc::new(Activity::new(Instant::now()));
        let first = InFlight::start(&a, http::Version::HTTP_11);
        let second = InFlight::start(&a, http::Version::HTTP_11);
        assert_eq!(a.deadline(T), None);
        drop(first);
        assert_eq!(a.deadline(T), None, "one is still in flight");
        drop(second);
        let (at, expiry) = a.deadline(T).unwrap();
        assert_eq!(expiry, Expiry::Close, "idle: closed politely");
        assert!(at >= Instant::now() + T.idle - Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_byte_on_an_idle_http1_connection_starts_the_header_clock() {
        let a = Arc::new(Activity::new(Instant::now()));
        drop(InFlight::start(&a, http::Version::HTTP_11));
        assert_eq!(a.deadline(T).unwrap().1, Expiry::Close);
        a.bytes_read();
        let (at, expiry) = a.deadline(T).unwrap();
        assert_eq!(expiry, Expiry::Cut);
        assert!(at <= Instant::now() + T.header_read);
    }

    #[tokio::test]
    async fn frames_between_http2_requests_do_not_start_the_header_clock() {
        let a = Arc::new(Activity::new(Instant::now()));
        drop(InFlight::start(&a, http::Version::HTTP_2));
        a.bytes_read();
        assert_eq!(a.deadline(T).unwrap().1, Expiry::Close);
    }

    fn app() -> Router {
        Router::new().route("/healthz", axum::routing::get(|| async { "ok" }))
    }

    /// Reads from `client` until the answer's body `ok` arrived.
    async fn answer(client: &mut tokio::io::DuplexStream) -> String {
        use tokio::io::AsyncReadExt;
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while !seen.ends_with(b"ok") {
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the answer");
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    }

    /// Not only TCP: any byte stream (a TLS stream later) is served, under the same timers.
    #[tokio::test]
    async fn any_byte_stream_is_served_and_a_stalled_request_is_cut() {
        use tokio::io::AsyncWriteExt;
        let timeouts = Timeouts {
            header_read: Duration::from_millis(300),
            idle: Duration::from_secs(60),
            body: PACE,
        };
        let (mut client, server) = tokio::io::duplex(4096);
        let connection = tokio::spawn(serve_connection(
            server,
            super::super::Peer::default(),
            app(),
            timeouts,
            Seat::uncounted(Instant::now()),
            CancellationToken::new(),
        ));
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
        client
            .write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(2), connection)
            .await
            .expect("cut within the header-read timeout")
            .unwrap();
    }

    /// HTTP/2 (here with prior knowledge) is served too, and an idle HTTP/2 connection is closed
    /// with `GOAWAY`, which its client takes as a clean end.
    #[tokio::test]
    async fn http2_is_served_and_closed_when_idle() {
        let timeouts = Timeouts {
            header_read: Duration::from_secs(60),
            idle: Duration::from_millis(300),
            body: PACE,
        };
        let (client_io, server) = tokio::io::duplex(65536);
        let connection = tokio::spawn(serve_connection(
            server,
            super::super::Peer::default(),
            app(),
            timeouts,
            Seat::uncounted(Instant::now()),
            CancellationToken::new(),
        ));
        let (mut sender, client_connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(client_io))
                .await
                .unwrap();
        let client_connection = tokio::spawn(client_connection);
        let request = hyper::Request::get("http://x/healthz")
            .body(Body::empty())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        assert_eq!(response.status(), http::StatusCode::OK);
        let body = axum::body::to_bytes(Body::new(response.into_body()), 64)
            .await
            .unwrap();
        assert_eq!(&body[..], b"ok");
        tokio::time::timeout(Duration::from_secs(2), connection)
            .await
            .expect("closed when idle")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(2), client_connection)
            .await
            .expect("the client saw the end")
            .unwrap()
            .expect("a clean end (GOAWAY), not a reset");
    }

    #[tokio::test]
    async fn a_stop_closes_an_idle_connection_at_once() {
        use tokio::io::AsyncWriteExt;
        let timeouts = Timeouts {
            header_read: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            body: PACE,
        };
        let stopping = CancellationToken::new();
        let (mut client, server) = tokio::io::duplex(4096);
        let connection = tokio::spawn(serve_connection(
            server,
            super::super::Peer::default(),
            app(),
            timeouts,
            Seat::uncounted(Instant::now()),
            stopping.clone(),
        ));
        client
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        answer(&mut client).await;
        stopping.cancel();
        tokio::time::timeout(Duration::from_secs(2), connection)
            .await
            .expect("closed at the stop")
            .unwrap();
    }

    #[tokio::test]
    async fn a_connection_asked_to_close_that_does_not_is_cut() {
        let a = Activity::new(Instant::now());
        let now = Instant::now();
        a.closing(now);
        assert_eq!(a.deadline(T), Some((now + T.header_read, Expiry::Cut)));
        assert_eq!(a.expired(T, now), None);
        assert_eq!(a.expired(T, now + T.header_read), Some(Expiry::Cut));
    }
}

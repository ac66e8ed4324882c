//! A minimum rate for request bodies (issue 49): a body must arrive within `body_read_timeout`
//! plus one second per `min_body_rate` bytes received. Without it a client that sent its headers
//! and then one byte every few seconds held its connection (and, once authenticated, the slots
//! kept for agents) for as long as it liked: neither the header-read nor the idle timer runs
//! while a request is in flight. The bound is the one Apache's `mod_reqtimeout` puts on bodies:
//! a slow but steady upload of a large body is served; a trickle is not.
//!
//! A body that falls behind ends with [`BodyTooSlow`], which whoever reads it answers (the
//! front with `408`), and its connection is closed after that answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use super::seat::Seat;

/// How fast a request body must arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Allowed before the rate applies (`[gateway] body_read_timeout`).
    pub grace: Duration,
    /// Bytes per second, after the grace (`[gateway] min_body_rate`).
    pub min_rate: u64,
}

impl Pace {
    /// When a body that started at `started` and has brought `received` bytes is too slow.
    fn deadline(&self, started: Instant, received: u64) -> Instant {
        let earned = Duration::from_secs_f64(received as f64 / self.min_rate.max(1) as f64);
        started + self.grace + earned
    }
}

/// The error a body that fell behind its [`Pace`] ends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyTooSlow {
    pub pace: Pace,
    pub received: u64,
}

impl fmt::Display for BodyTooSlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the request body arrived slower than [gateway] min_body_rate ({} bytes per second \
             after body_read_timeout, {:?}): {} bytes came",
            self.pace.min_rate, self.pace.grace, self.received
        )
    }
}

impl std::error::Error for BodyTooSlow {}

/// Whether `error` (or what caused it) is a body that fell behind its pace.
pub fn too_slow(error: &(dyn std::error::Error + 'static)) -> Option<BodyTooSlow> {
    let mut at = Some(error);
    while let Some(e) = at {
        if let Some(slow) = e.downcast_ref::<BodyTooSlow>() {
            return Some(*slow);
        }
        at = e.source();
    }
    None
}

/// A request body under a [`Pace`].
pub struct Paced {
    inner: Incoming,
    pace: Pace,
    started: Instant,
    received: u64,
    /// Armed the first time the body has to wait for bytes.
    timer: Option<Pin<Box<Sleep>>>,
    seat: Arc<Seat>,
}

impl Paced {
    /// `body` under `pace`; an empty body is passed as it is (no timer for a `GET`).
    pub fn body(body: Incoming, pace: Pace, seat: &Arc<Seat>) -> Body {
        if body.is_end_stream() {
            return Body::new(body);
        }
        Body::new(Paced {
            inner: body,
            pace,
            started: Instant::now(),
            received: 0,
            timer: None,
            seat: seat.clone(),
        })
    }
}

impl http_body::Body for Paced {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other.map(|r| r.map_err(Into::into))),
            Poll::Pending => {
                let deadline = this.pace.deadline(this.started, this.received);
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                // Whatever the reader answers, the rest of this body will not be read.
                this.seat.close();
                let slow = BodyTooSlow {
                    pace: this.pace,
                    received: this.received,
                };
                Poll::Ready(Some(Err(Box::new(slow))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_grows_with_what_arrived() {
        let pace = Pace {
            grace: Duration::from_secs(10),
            min_rate: 1000,
        };
        let t = Instant::now();
        assert_eq!(pace.deadline(t, 0), t + Duration::from_secs(10));
        assert_eq!(pace.deadline(t, 5000), t + Duration::from_secs(15));
        let slow = BodyTooSlow { pace, received: 3 };
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(slow);
        let wrapped = axum::Error::new(boxed);
        assert_eq!(too_slow(&wrapped), Some(slow), "found through the wrapping");
        assert!(too_slow(&std::io::Error::other("x")).is_none());
    }
}

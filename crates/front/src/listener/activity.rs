//! What a connection does, as far as its timers care ([`Activity`]): requests in flight, what
//! it waits for and since when, whether it was asked to close. Shared by the connection's task,
//! its requests, its byte stream and its seat.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The two timers [`Activity`] keeps (a connection's `Timeouts` less its body pace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Timers {
    pub(super) header_read: Duration,
    pub(super) idle: Duration,
}

/// What a timer that ran out does to the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expiry {
    /// Drop it: the client is mid-request (or ignored a close) and owed nothing.
    Cut,
    /// Close it politely: HTTP/1.1 closes at once, HTTP/2 sends `GOAWAY`.
    Close,
}

/// What a connection does, as far as its timers care; shared by the connection's task, its
/// requests, its byte stream and its seat.
pub(super) struct Activity {
    state: Mutex<State>,
    /// Woken on every change, so the task re-reads its deadline.
    pub(super) changed: Notify,
}

pub(super) struct State {
    /// Requests whose responses are not yet written out (or dropped).
    requests: usize,
    /// With no request in flight: what the connection waits for, since when.
    waiting: Waiting,
    /// Asked to close after being idle, at this time.
    closing_since: Option<Instant>,
    /// To be closed once its requests are answered (an anonymous request on a kept slot).
    pub(super) close_asked: bool,
    /// HTTP/2 sends frames (pings, window updates) between requests: for it a byte read is not
    /// the start of a request.
    http2: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiting {
    /// A request's headers, since the accept or the request's first byte.
    Headers(Instant),
    /// Any request, since the last response ended.
    Idle(Instant),
}

impl Activity {
    pub(super) fn new(accepted_at: Instant) -> Activity {
        Activity {
            state: Mutex::new(State {
                requests: 0,
                waiting: Waiting::Headers(accepted_at),
                closing_since: None,
                close_asked: false,
                http2: false,
            }),
            changed: Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.lock());
        self.changed.notify_one();
    }

    /// When the next timer runs out, and what it does then; `None` while a request is in flight.
    pub(super) fn deadline(&self, timers: impl Into<Timers>) -> Option<(Instant, Expiry)> {
        let timeouts = timers.into();
        let state = self.lock();
        if state.requests > 0 {
            return None;
        }
        if let Some(since) = state.closing_since {
            return Some((since + timeouts.header_read, Expiry::Cut));
        }
        Some(match state.waiting {
            Waiting::Headers(since) => (since + timeouts.header_read, Expiry::Cut),
            Waiting::Idle(since) => (since + timeouts.idle, Expiry::Close),
        })
    }

    /// What to do at `now`, if a timer has run out by then.
    pub(super) fn expired(&self, timers: impl Into<Timers>, now: Instant) -> Option<Expiry> {
        self.deadline(timers)
            .filter(|(at, _)| *at <= now)
            .map(|(_, expiry)| expiry)
    }

    /// Since when no request has been in flight; `None` while one is.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        let state = self.lock();
        (state.requests == 0).then_some(match state.waiting {
            Waiting::Headers(since) | Waiting::Idle(since) => since,
        })
    }

    /// Closes the connection once its requests in flight are answered.
    pub(super) fn ask_close(&self) {
        self.update(|s| s.close_asked = true);
    }

    pub(super) fn close_asked(&self) -> bool {
        let state = self.lock();
        state.close_asked || state.closing_since.is_some()
    }

    pub(super) fn closing(&self, now: Instant) {
        self.update(|s| s.closing_since = Some(now));
    }

    pub(super) fn request_started(&self, version: http::Version) {
        self.update(|s| {
            s.requests += 1;
            s.http2 |= version == http::Version::HTTP_2;
        });
    }

    pub(super) fn request_ended(&self) {
        self.update(|s| {
            s.requests = s.requests.saturating_sub(1);
            if s.requests == 0 {
                s.waiting = Waiting::Idle(Instant::now());
            }
        });
    }

    /// Bytes arrived: on an idle HTTP/1.1 connection, a request has begun and its headers are
    /// now on the clock.
    pub(super) fn bytes_read(&self) {
        let mut state = self.lock();
        if state.requests == 0 && !state.http2 && matches!(state.waiting, Waiting::Idle(_)) {
            state.waiting = Waiting::Headers(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }
}

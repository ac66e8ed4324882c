//! A replayed stream, and the delivery it records of the answers it carried.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postern_core::ExecutionId;
use postern_pipeline::Gateway;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use tokio::sync::mpsc;

use super::Replayed;

/// A replayed stream. An execution whose answer it carried is recorded `delivered` once that
/// event was taken by the connection — the stream is polled again after yielding it, or ends —
/// and `delivery_failed` if the client went away before.
pub(super) struct Replay {
    queue: VecDeque<Replayed>,
    live: Option<mpsc::UnboundedReceiver<Replayed>>,
    carried: Vec<ExecutionId>,
    gateway: Arc<Gateway>,
    ended: bool,
}

impl Replay {
    /// A replay of `queue`, then of what the live stream (if still running) sends on.
    pub(super) fn new(
        queue: VecDeque<Replayed>,
        live: Option<mpsc::UnboundedReceiver<Replayed>>,
        gateway: Arc<Gateway>,
    ) -> Replay {
        Replay {
            queue,
            live,
            carried: Vec::new(),
            gateway,
            ended: false,
        }
    }

    fn end(&mut self, delivered: bool) {
        if self.ended {
            return;
        }
        self.ended = true;
        let ids = std::mem::take(&mut self.carried);
        // A replay repeats an answer: only a first delivery is recorded (that takes a read, so
        // it runs on the runtime; a drop outside one records as before).
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let gateway = self.gateway.clone();
                runtime.spawn(async move {
                    gateway
                        .records()
                        .record_first_delivery(&ids, delivered)
                        .await
                });
            }
            Err(_) => self.gateway.records().record_delivery(&ids, delivered),
        }
    }

    fn yield_event(&mut self, r: Replayed) -> Poll<Option<ServerSseMessage>> {
        if let Some(id) = r.execution {
            self.carried.push(id);
        }
        Poll::Ready(Some(r.sse))
    }
}

impl futures_core::Stream for Replay {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        let this = self.get_mut();
        if !this.carried.is_empty() {
            // Polled again: the answers yielded last were taken by the connection.
            let ids = std::mem::take(&mut this.carried);
            let gateway = this.gateway.clone();
            tokio::spawn(async move { gateway.records().record_first_delivery(&ids, true).await });
        }
        if let Some(r) = this.queue.pop_front() {
            return this.yield_event(r);
        }
        if let Some(rx) = this.live.as_mut() {
            match rx.poll_recv(cx) {
                Poll::Ready(Some(r)) => return this.yield_event(r),
                Poll::Ready(None) => this.live = None,
                Poll::Pending => return Poll::Pending,
            }
        }
        this.end(true);
        Poll::Ready(None)
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.end(false);
    }
}

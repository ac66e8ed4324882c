//! Delivery of answers: which executions' answers travel in an HTTP response, and whether the
//! response was written out completely (recorded as `delivered` / `delivery_failed`), and the
//! binding of a response's SSE stream to its session and actor.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use postern_core::ExecutionId;
use tokio_util::sync::CancellationToken;

use super::streams::DurableStreams;
use crate::pipeline::Gateway;

/// Executions whose answer travels in this HTTP response, and whether the response already
/// ended (a client that hung up before the answer existed still lost it).
#[derive(Clone, Default)]
pub(super) struct DeliverySlot(pub(super) Arc<Mutex<SlotState>>);

#[derive(Default)]
pub(super) struct SlotState {
    pub(super) ids: Vec<ExecutionId>,
    pub(super) ended: Option<bool>,
    /// Fired when the response ends unwritten (a sessionless call's cancellation).
    pub(super) on_lost: Option<CancellationToken>,
}

impl DeliverySlot {
    /// Registers an execution whose answer is about to be written into this response.
    pub(super) fn carry(&self, gateway: &Arc<Gateway>, id: ExecutionId) {
        let ended = match self.0.lock() {
            Ok(mut st) => {
                if st.ended.is_none() {
                    st.ids.push(id);
                }
                st.ended
            }
            Err(_) => None,
        };
        if let Some(delivered) = ended {
            gateway.record_delivery(&[id], delivered);
        }
    }

    pub(super) fn end(&self, gateway: &Arc<Gateway>, delivered: bool) {
        let ids = match self.0.lock() {
            Ok(mut st) => {
                st.ended = Some(delivered);
                if !delivered {
                    if let Some(token) = st.on_lost.take() {
                        token.cancel();
                    }
                }
                std::mem::take(&mut st.ids)
            }
            Err(_) => Vec::new(),
        };
        gateway.record_delivery(&ids, delivered);
    }
}

/// Armed while the response is being produced; dropped armed, it ends the slot as lost.
pub(super) struct GoneBeforeAnswer {
    pub(super) slot: Option<DeliverySlot>,
    pub(super) gateway: Arc<Gateway>,
}

impl Drop for GoneBeforeAnswer {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.end(&self.gateway, false);
        }
    }
}

/// Binds a request's SSE stream to its session and actor on its first event id.
pub(super) struct StreamClaim {
    pub(super) streams: Arc<DurableStreams>,
    pub(super) session: Option<String>,
    pub(super) actor: String,
}

impl StreamClaim {
    /// Claims the stream if this chunk carries an event id; returns that id.
    fn try_claim(&self, chunk: &[u8]) -> Option<String> {
        let text = String::from_utf8_lossy(chunk);
        let id = text
            .lines()
            .find_map(|l| l.strip_prefix("id:").map(str::trim))?;
        self.streams
            .claim(id, self.session.clone(), self.actor.clone());
        Some(id.to_string())
    }
}

/// A response body that records, when it ends, whether it was written out completely.
pub(super) struct TrackedBody {
    pub(super) inner: Body,
    pub(super) slot: DeliverySlot,
    pub(super) gateway: Arc<Gateway>,
    pub(super) finished: bool,
    pub(super) claim: Option<StreamClaim>,
    /// The stream this body carries, once its first event id was seen.
    pub(super) claimed: Option<(Arc<DurableStreams>, String)>,
    /// The actor's in-flight call slot, released when the answer has been written (or lost).
    pub(super) call_slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The actor's stream slot, while this body is a stream.
    pub(super) stream_slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The session this answers on is in use (never evicted) until the body ends.
    pub(super) session_busy: Option<super::limits::SessionBusy>,
}

impl TrackedBody {
    fn finish(&mut self, delivered: bool) {
        if self.finished {
            return;
        }
        self.finished = true;
        // The slots come back as the body ends, before the client can see its end and ask again.
        self.call_slot = None;
        self.stream_slot = None;
        self.session_busy = None;
        if !delivered {
            if let Some((streams, id)) = &self.claimed {
                streams.abandoned(id);
            }
        }
        self.slot.end(&self.gateway, delivered);
    }
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let (Some(claim), Poll::Ready(Some(Ok(frame)))) = (&this.claim, &polled) {
            if let Some(id) = frame.data_ref().and_then(|d| claim.try_claim(d)) {
                this.claimed = Some((claim.streams.clone(), id));
                this.claim = None;
            }
        }
        match &polled {
            Poll::Ready(None) => this.finish(true),
            Poll::Ready(Some(Err(_))) => this.finish(false),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        // Dropped before its end: the connection went away and the answer was lost.
        self.finish(false);
    }
}

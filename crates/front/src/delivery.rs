//! Delivery of answers: which executions' answers travel in an HTTP response, and whether the
//! frame carrying them was taken by the connection (recorded as `delivered` /
//! `delivery_failed`), and the binding of a response's SSE stream to its session and actor.
//!
//! An answer is delivered when the body frame that carries it (the JSON-RPC response to the
//! request, found by its id) was handed to the connection and the connection took it: the body
//! is polled again after that frame, or ends with it. That is the evidence the server has that
//! the bytes went to the socket; it cannot prove the agent read them. A client that reads the
//! answer and hangs up before the body's end is not a loss; one that left before the frame was
//! handed over is.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use postern_core::ExecutionId;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::streams::{DurableStreams, StoredEvent};
use postern_pipeline::Gateway;

/// Where a response's deliveries are recorded: the gateway's ledger (a stand-in in tests).
pub(super) trait RecordsDelivery: Send + Sync {
    fn record_delivery(&self, ids: &[ExecutionId], delivered: bool);
}

impl RecordsDelivery for Gateway {
    fn record_delivery(&self, ids: &[ExecutionId], delivered: bool) {
        self.records().record_delivery(ids, delivered);
    }
}

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

    /// Whether an execution's answer is registered to travel in this response.
    fn carrying(&self) -> bool {
        self.0.lock().is_ok_and(|st| !st.ids.is_empty())
    }

    /// The answer's frame was taken by the connection: its executions are delivered, whatever
    /// becomes of the rest of the response.
    fn settle(&self, gateway: &dyn RecordsDelivery) {
        let ids = match self.0.lock() {
            Ok(mut st) => std::mem::take(&mut st.ids),
            Err(_) => Vec::new(),
        };
        gateway.record_delivery(&ids, true);
    }

    pub(super) fn end(&self, gateway: &dyn RecordsDelivery, delivered: bool) {
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
            slot.end(&*self.gateway, false);
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
    pub(super) gateway: Arc<dyn RecordsDelivery>,
    pub(super) finished: bool,
    pub(super) claim: Option<StreamClaim>,
    /// The stream this body carries, once its first event id was seen.
    pub(super) claimed: Option<(Arc<DurableStreams>, String)>,
    /// The actor's in-flight call slot, released when the answer has been written (or lost).
    pub(super) call_slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The actor's stream slot, while this body is a stream.
    pub(super) stream_slot: Option<super::limits::StreamPermit>,
    /// An idle stream's end, when it must make room for another stream of its actor.
    pub(super) evicted: Option<Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>>,
    /// The JSON-RPC id of the request this body answers (`None`: any response frame, for a
    /// stream that is not a request's own).
    pub(super) answers: Option<serde_json::Value>,
    /// The answer's frame was handed to the connection; the next poll settles it.
    pub(super) handed: bool,
    /// The session this answers on is in use (never evicted) until the body ends.
    pub(super) session_busy: Option<super::limits::SessionBusy>,
}

impl TrackedBody {
    /// The answer's frame was taken by the connection: its executions are delivered.
    fn settle(&mut self) {
        if std::mem::take(&mut self.handed) {
            self.slot.settle(&*self.gateway);
        }
    }

    /// Whether this data frame carries the JSON-RPC response this body exists for (only looked
    /// at once an execution's answer was registered to travel here). An SSE event this process
    /// stored is known by its id; any other frame is read.
    fn carries_answer(&self, data: &[u8]) -> bool {
        if !self.slot.carrying() {
            return false;
        }
        let streams = self.claimed.as_ref().map(|(streams, _)| streams);
        let known = streams
            .zip(sse_event_id(data))
            .and_then(|(streams, id)| streams.stored(id));
        let (is_response, id) = match known {
            Some(StoredEvent::Response(id)) => (true, id),
            Some(StoredEvent::Other) => (false, None),
            None => {
                let Some(message) = jsonrpc_message(data) else {
                    return false;
                };
                (
                    !message.method && (message.result || message.error),
                    message.id,
                )
            }
        };
        is_response && self.answers.as_ref().is_none_or(|a| id.as_ref() == Some(a))
    }

    fn finish(&mut self, delivered: bool) {
        if self.finished {
            return;
        }
        // A frame handed over with the body's end (a JSON answer) was taken with it.
        if self.handed && http_body::Body::is_end_stream(&self.inner) {
            self.settle();
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
        self.slot.end(&*self.gateway, delivered);
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
        if let Some(evicted) = &mut this.evicted {
            if evicted.as_mut().poll(cx).is_ready() {
                // An idle stream carries no answer: ended cleanly, it lost nothing.
                this.finish(true);
                return Poll::Ready(None);
            }
        }
        // Polled again: the connection took the frame handed last.
        this.settle();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                if let Some(claim) = &this.claim {
                    if let Some(id) = claim.try_claim(data) {
                        this.claimed = Some((claim.streams.clone(), id));
                        this.claim = None;
                    }
                }
                if this.carries_answer(data) {
                    this.handed = true;
                }
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

/// What [`TrackedBody::carries_answer`] needs of a JSON-RPC message: which members it has, and
/// its id. The rest (a result can be large) is skipped, never built: building it as a
/// `serde_json::Map` cost more than rmcp's own parse of the request. A repeated member makes
/// the frame no answer (rmcp's serialiser writes none); a JSON array is never one.
#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "present")]
    method: bool,
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
    /// `Some` whenever the member is there, `null` included.
    #[serde(default, deserialize_with = "some_value")]
    id: Option<serde_json::Value>,
}

/// A member that is there, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

fn some_value<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

/// An SSE event's id (its `id:` line), if the frame is one. Looked for from the end: the
/// frames here write it after the `data:` line, which holds the whole answer.
fn sse_event_id(data: &[u8]) -> Option<&str> {
    let line = data
        .rsplit(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"id:"))?;
    std::str::from_utf8(line).ok().map(str::trim)
}

/// The JSON-RPC message in a body frame: a JSON body, or an SSE event's `data:` lines.
fn jsonrpc_message(data: &[u8]) -> Option<Envelope> {
    let text = std::str::from_utf8(data).ok()?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        return serde_json::from_str(trimmed).ok();
    }
    let payload: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    if payload.is_empty() {
        return None;
    }
    serde_json::from_str(&payload.join("\n")).ok()
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body::Body as _;
    use tokio::sync::mpsc;

    use super::*;

    #[test]
    fn the_message_of_a_frame_is_found_in_json_and_in_sse() {
        let json = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"x"}]}}"#;
        let message = jsonrpc_message(json).unwrap();
        assert_eq!(message.id, Some(serde_json::json!(7)));
        assert!(message.result && !message.error && !message.method);
        let sse =
            b"id: s/3\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}\n\n";
        assert_eq!(
            jsonrpc_message(sse).unwrap().id,
            Some(serde_json::json!("a"))
        );
        // A member is there even when null; a request (with `method`) is not an answer.
        let null_result = br#"{"jsonrpc":"2.0","id":null,"result":null}"#;
        let message = jsonrpc_message(null_result).unwrap();
        assert!(message.result && message.id == Some(serde_json::Value::Null));
        let request = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        assert!(jsonrpc_message(request).unwrap().method);
        // Not JSON (a broken result) is no message at all.
        assert!(jsonrpc_message(br#"{"jsonrpc":"2.0","id":1,"result":{"#).is_none());
        let priming = b"id: s/0\nretry: 3000\ndata:\n\n";
        assert!(jsonrpc_message(priming).is_none());
        assert!(jsonrpc_message(b": keep-alive\n\n").is_none());
    }

    #[derive(Default)]
    struct Recorded(Mutex<Vec<bool>>);

    impl RecordsDelivery for Recorded {
        fn record_delivery(&self, ids: &[ExecutionId], delivered: bool) {
            let mut seen = self.0.lock().unwrap();
            seen.extend(ids.iter().map(|_| delivered));
        }
    }

    /// A body whose frames the test sends one by one; it stays open until `end` is dropped.
    struct Frames(mpsc::UnboundedReceiver<Bytes>);

    impl futures_core::Stream for Frames {
        type Item = Result<Bytes, Infallible>;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            self.0.poll_recv(cx).map(|f| f.map(Ok))
        }
    }

    const PRIMING: &[u8] = b"id: s/0\nretry: 3000\ndata:\n\n";
    const PROGRESS: &[u8] = b"id: s/1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n";
    const RESULT: &[u8] = b"id: s/2\ndata: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}\n\n";
    const OTHER: &[u8] = b"id: s/2\ndata: {\"jsonrpc\":\"2.0\",\"id\":6,\"result\":{}}\n\n";

    fn tracked(inner: Body, recorded: &Arc<Recorded>) -> TrackedBody {
        let slot = DeliverySlot::default();
        slot.0
            .lock()
            .unwrap()
            .ids
            .push(ExecutionId::from_bytes([3; 16]));
        TrackedBody {
            inner,
            slot,
            gateway: recorded.clone(),
            finished: false,
            claim: None,
            claimed: None,
            call_slot: None,
            stream_slot: None,
            evicted: None,
            answers: Some(serde_json::json!(5)),
            handed: false,
            session_busy: None,
        }
    }

    /// A stream body, its sender, and a poll of it.
    fn sse(recorded: &Arc<Recorded>) -> (TrackedBody, mpsc::UnboundedSender<Bytes>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tracked(Body::from_stream(Frames(rx)), recorded), tx)
    }

    fn poll(body: &mut TrackedBody) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(body).poll_frame(&mut cx)
    }

    fn outcome(recorded: &Recorded) -> Vec<bool> {
        recorded.0.lock().unwrap().clone()
    }

    /// An event known by its id reads as the frame carrying it would: responses and errors
    /// with their ids (number, string, none), a request, a notification, a priming event.
    #[test]
    fn a_stored_event_reads_as_its_frame_does() {
        use crate::streams::StoredEvent;
        use rmcp::model::ServerJsonRpcMessage;
        let messages = [
            serde_json::json!({"jsonrpc": "2.0", "id": 5, "result": {"content": []}}),
            serde_json::json!({"jsonrpc": "2.0", "id": "req-7", "result": {}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32005, "message": "no"}}),
            serde_json::json!({"jsonrpc": "2.0", "error": {"code": -32700, "message": "parse"}}),
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}),
            serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
        ];
        let mut responses = 0;
        for json in messages {
            let message: ServerJsonRpcMessage = serde_json::from_value(json.clone()).unwrap();
            let frame = format!(
                "data: {}\nid: s/1\n\n",
                serde_json::to_string(&message).unwrap()
            );
            assert_eq!(sse_event_id(frame.as_bytes()), Some("s/1"));
            let read = jsonrpc_message(frame.as_bytes()).unwrap();
            let as_read = if !read.method && (read.result || read.error) {
                StoredEvent::Response(read.id.filter(|id| !id.is_null()))
            } else {
                StoredEvent::Other
            };
            let known = StoredEvent::of(Some(&message));
            responses += usize::from(matches!(known, StoredEvent::Response(_)));
            assert_eq!(known, as_read, "{json}");
        }
        assert_eq!(responses, 4);
        assert_eq!(StoredEvent::of(None), StoredEvent::Other);
        assert_eq!(
            sse_event_id(b"id: s/0\nretry: 3000\ndata:\n\n"),
            Some("s/0")
        );
        assert_eq!(sse_event_id(b":\n\n"), None);
    }

    /// An upstream's answer cannot name another event: its text may hold `\nid: ` lines, but
    /// the frame's JSON escapes them, so the only id line is the frame's own. (Were it read
    /// from the text, a tool could make its answer pass for another stream's event and have
    /// this one's delivery recorded, or never recorded.)
    #[test]
    fn an_answer_cannot_name_its_own_event_id() {
        use rmcp::model::ServerJsonRpcMessage;
        let forged = "done\nid: other/9\n\nid: s/7\n";
        let message: ServerJsonRpcMessage = serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0", "id": 5,
            "result": {"content": [{"type": "text", "text": forged}]}
        }))
        .unwrap();
        let frame = format!(
            "data: {}\nid: s/1\n\n",
            serde_json::to_string(&message).unwrap()
        );
        assert_eq!(sse_event_id(frame.as_bytes()), Some("s/1"));
        let frame = format!(
            "id: s/1\ndata: {}\n\n",
            serde_json::to_string(&message).unwrap()
        );
        assert_eq!(sse_event_id(frame.as_bytes()), Some("s/1"));
    }

    /// The answer's frame taken, and the body polled again while the stream is still open
    /// (the client read it and hung up before the stream's end): delivered, once.
    #[test]
    fn a_poll_after_the_answer_frame_is_the_evidence_of_delivery() {
        let recorded = Arc::new(Recorded::default());
        let (mut body, tx) = sse(&recorded);
        for frame in [PRIMING, PROGRESS, RESULT] {
            tx.send(Bytes::from_static(frame)).unwrap();
            assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        }
        assert!(outcome(&recorded).is_empty(), "handed, not yet taken");
        assert!(poll(&mut body).is_pending());
        assert_eq!(outcome(&recorded), [true]);
        drop(body);
        assert_eq!(
            outcome(&recorded),
            [true],
            "the lost rest of the stream lost no answer"
        );
    }

    /// A client gone before the answer existed, or before its frame was taken, lost it; so did
    /// one whose only frames were a notification and another request's answer.
    #[test]
    fn an_answer_never_taken_by_the_connection_is_lost() {
        let cases: [&[&[u8]]; 4] = [&[PRIMING], &[PRIMING, RESULT], &[PROGRESS], &[OTHER]];
        for frames in cases {
            let recorded = Arc::new(Recorded::default());
            let (mut body, tx) = sse(&recorded);
            for (i, frame) in frames.iter().enumerate() {
                tx.send(Bytes::from_static(frame)).unwrap();
                assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
                // Polled again after every frame but an answer's last one.
                if i + 1 < frames.len() || frames.last() != Some(&RESULT) {
                    assert!(poll(&mut body).is_pending());
                }
            }
            drop(body);
            assert_eq!(outcome(&recorded), [false], "{frames:?}");
        }
    }

    /// The stream's end after the answer is delivery; a JSON answer (one frame that ends the
    /// body, which hyper takes without polling again) is delivered when dropped after it.
    #[test]
    fn the_body_ending_with_the_answer_is_delivery() {
        let recorded = Arc::new(Recorded::default());
        let (mut body, tx) = sse(&recorded);
        tx.send(Bytes::from_static(RESULT)).unwrap();
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        drop(tx);
        assert!(matches!(poll(&mut body), Poll::Ready(None)));
        drop(body);
        assert_eq!(outcome(&recorded), [true]);

        let recorded = Arc::new(Recorded::default());
        let json = Body::from(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#);
        let mut body = tracked(json, &recorded);
        assert!(matches!(poll(&mut body), Poll::Ready(Some(Ok(_)))));
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(outcome(&recorded), [true]);
    }
}

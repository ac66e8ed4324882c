//! The HTTP client of a Streamable HTTP upstream link: rmcp's reqwest client, plus one rule
//! rmcp does not have. A server that no longer knows the link's session (it restarted) answers
//! a request in that session with an error that names no request — the TypeScript SDK sends
//! HTTP 400 `{"error": {"message": "Bad Request: No valid session ID provided"}, "id": null}`
//! — which rmcp would pass on as an answer to nothing, leaving the request to wait for its
//! whole timeout. Here any error without the request's id, to a request sent in a session, is
//! the session expired (as a 404 is): the server did not take the request, the link ends, and
//! the supervisor opens a new session.

use std::collections::HashMap;
use std::sync::Arc;

use futures_core::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

#[derive(Clone)]
pub(super) struct SessionGuard(pub reqwest::Client);

type Posted = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

/// A request's answer in a session, seen as what it means for that session.
fn guarded(message: &ClientJsonRpcMessage, in_session: bool, posted: Posted) -> Posted {
    let ClientJsonRpcMessage::Request(request) = message else {
        return posted;
    };
    match posted {
        Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _))
            if in_session && e.id.as_ref() != Some(&request.id) =>
        {
            tracing::info!(error = %e.error.message, "the upstream answered a request in the link's session with an error naming no request: its session is gone");
            Err(StreamableHttpError::SessionExpired)
        }
        other => other,
    }
}

impl StreamableHttpClient for SessionGuard {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Posted {
        let in_session = session_id.is_some();
        let posted = self
            .0
            .post_message(
                uri,
                message.clone(),
                session_id,
                auth_header,
                custom_headers,
            )
            .await;
        guarded(&message, in_session, posted)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Posted {
        let in_session = session_id.is_some();
        let posted = self
            .0
            .post_message_with_response_limits(
                uri,
                message.clone(),
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        guarded(&message, in_session, posted)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// Whether an HTTP link error proves the request was not taken: the connection was refused
/// (nothing written), or the server said the session is gone (it did not process the request).
pub fn not_taken(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(current) = source {
        if let Some(r) = current.downcast_ref::<reqwest::Error>() {
            return r.is_connect();
        }
        match current.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::Client(r)) => return r.is_connect(),
            Some(StreamableHttpError::SessionExpired) => return true,
            _ => {}
        }
        source = current.source();
    }
    false
}

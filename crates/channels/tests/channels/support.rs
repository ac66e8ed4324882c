//! Test servers: an axum app that records every request it gets, and raw TCP servers that
//! misbehave in ways axum will not.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Router;
use postern_channels::http::{HttpDispatch, HttpOutcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Clone, Default)]
struct AppState {
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// The axum test server. Paths:
/// `/status/<code>` answers `<code>` with `{"status":<code>}`;
/// `/echo-auth` answers 200 with the authorization header in the body, `etag` and `location`;
/// `/big/<n>` answers `n` bytes of `x`; `/slow/<ms>` sleeps, then answers 200;
/// `/echo-body` answers 200 with the request body; `/redirect` answers 303 to `/landed`; anything else answers 200 `{"ok":true}`.
pub struct TestServer {
    pub addr: SocketAddr,
    scheme: &'static str,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// TLS handshakes that failed (always 0 for plain http).
    failed_handshakes: Arc<AtomicUsize>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        let state = AppState::default();
        let seen = state.seen.clone();
        let app = Router::new().fallback(handle).with_state(state);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        TestServer {
            addr,
            scheme: "http",
            seen,
            failed_handshakes: Arc::default(),
        }
    }

    /// The same server behind TLS with `config`; its URLs are `https://127.0.0.1:PORT`.
    pub async fn start_tls(config: Arc<rustls::ServerConfig>) -> TestServer {
        let state = AppState::default();
        let seen = state.seen.clone();
        let app = Router::new().fallback(handle).with_state(state);
        let listener = postern_testkit::TlsListener::bind(config).await.unwrap();
        let addr = axum::serve::Listener::local_addr(&listener).unwrap();
        let failed_handshakes = listener.failed_handshakes();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        TestServer {
            addr,
            scheme: "https",
            seen,
            failed_handshakes,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    pub fn failed_handshakes(&self) -> usize {
        self.failed_handshakes.load(Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn handle(State(state): State<AppState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let path = parts.uri.path().to_string();
    let body_copy = body.to_vec();
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: parts.headers.clone(),
        body,
    });
    let response = |status: u16, body: Vec<u8>| {
        Response::builder()
            .status(StatusCode::from_u16(status).unwrap())
            .header("content-type", "application/json")
            .header("x-not-of-interest", "dropped")
            .body(Body::from(body))
            .unwrap()
    };
    if let Some(code) = path.strip_prefix("/status/") {
        let code: u16 = code.parse().unwrap();
        let mut r = response(code, format!("{{\"status\":{code}}}").into_bytes());
        if code == 429 {
            r.headers_mut()
                .insert("retry-after", HeaderValue::from_static("7"));
        }
        return r;
    }
    if let Some(n) = path.strip_prefix("/big/") {
        return response(200, vec![b'x'; n.parse().unwrap()]);
    }
    if let Some(ms) = path.strip_prefix("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
        return response(200, b"{\"late\":true}".to_vec());
    }
    match path.as_str() {
        "/echo-auth" => {
            let auth = parts
                .headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            let mut r = response(200, format!("{{\"you_sent\":{auth:?}}}").into_bytes());
            let h = r.headers_mut();
            h.insert(
                "etag",
                HeaderValue::from_str(&format!("\"{auth}\"")).unwrap(),
            );
            let location = format!("/things?auth={auth}").replace(' ', "+");
            h.insert("location", HeaderValue::from_str(&location).unwrap());
            r
        }
        "/echo-body" => response(200, body_copy),
        "/redirect" => {
            let mut r = response(303, Vec::new());
            r.headers_mut()
                .insert("location", HeaderValue::from_static("/landed"));
            r
        }
        _ => response(200, b"{\"ok\":true}".to_vec()),
    }
}

/// What a raw server does once it has read a whole request.
#[derive(Clone, Copy, Debug)]
pub enum AfterRead {
    /// Close the connection (FIN) without answering.
    Close,
    /// Reset the connection (RST) without answering.
    Reset,
    /// Reset the connection as soon as it is accepted, before reading anything. The request
    /// is not counted.
    ResetOnAccept,
    /// Send a status line and headers announcing 100 body bytes, send 10, then close.
    CutBody,
}

/// A raw TCP server that reads each request completely, counts it, then misbehaves.
pub struct RawServer {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicUsize>,
}

impl RawServer {
    pub async fn start(after: AfterRead) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let count = requests.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let count = count.clone();
                tokio::spawn(async move { misbehave(stream, after, count).await });
            }
        });
        RawServer { addr, requests }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn misbehave(mut stream: TcpStream, after: AfterRead, count: Arc<AtomicUsize>) {
    if let AfterRead::ResetOnAccept = after {
        stream.set_zero_linger().unwrap();
        return;
    }
    read_request(&mut stream).await;
    count.fetch_add(1, Ordering::SeqCst);
    match after {
        AfterRead::Close => {
            stream.shutdown().await.ok();
        }
        AfterRead::ResetOnAccept => unreachable!(),
        AfterRead::Reset => {
            stream.set_zero_linger().unwrap();
        }
        AfterRead::CutBody => {
            let head = "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(b"{\"id\":\"in").await.unwrap();
            stream.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    drop(stream);
}

/// Reads one request: the head up to the blank line, then `content-length` body bytes.
pub async fn read_request(stream: &mut (impl tokio::io::AsyncRead + Unpin)) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending a whole request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending the body");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A dispatch with test-sized timeouts.
pub fn dispatch(method: &str, url: String) -> HttpDispatch {
    let mut d = HttpDispatch::new(method, url);
    d.connect_timeout = Duration::from_secs(2);
    d.response_timeout = Duration::from_secs(5);
    d
}

pub fn answered(outcome: HttpOutcome) -> postern_channels::http::HttpAnswer {
    match outcome {
        HttpOutcome::Answered(answer) => answer,
        other => panic!("expected an answer, got {other:?}"),
    }
}

//! A small, real invoice HTTP API: the target `postern demo` and the integration tests make
//! Postern call. `POST /invoices` honours `Idempotency-Key`; `GET /invoices?idempotency_key=K`
//! is the status query that turns an unknown outcome into a known one; an optional bearer token
//! guards every endpoint. Effects are counted by business key ([`InvoiceApi::count_for`]) so a
//! test can assert "the target holds ONE invoice"; every request is recorded. Two echo
//! endpoints ([`crate::echo`]) say the request back, as real APIs do, for the redaction tests.
//!
//! Failure injection ([`Mode`]) is honest: the hang and drop modes apply the effect first and
//! only then withhold the answer ("the target applied it, the gateway saw no answer"). A
//! withheld answer is never sent late: dropping the [`InvoiceApiHandle`] closes the connection.

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

use tokio::sync::watch;

use crate::echo;

/// One invoice the API created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Invoice {
    /// `inv_1`, `inv_2`, … in creation order.
    pub id: String,
    /// The business key effects are counted by.
    pub customer: String,
    pub amount: i64,
    /// `USD` when the request named none.
    pub currency: String,
    /// The `Idempotency-Key` header it was created under, if any.
    pub idempotency_key: Option<String>,
}

/// One request as the API received it (before authorization and routing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    /// The query string, without `?`.
    pub query: Option<String>,
    /// The `Idempotency-Key` header.
    pub idempotency_key: Option<String>,
    /// Whether an `Authorization` header was present (its value is never kept).
    pub has_authorization: bool,
    /// The W3C `traceparent` header (the gateway passes its span's context on).
    pub traceparent: Option<String>,
    pub body: String,
}

/// Failure injection for `POST /invoices`. Every mode but [`Mode::HangOnce`] stays until
/// [`InvoiceApi::set_mode`] or [`InvoiceApi::reset`] changes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Normal,
    /// Apply the request (create, or find the replayed invoice), then never answer: the client's
    /// timeout fires. The connection is closed without a response when the handle is dropped.
    HangAfterCreate,
    /// As [`Mode::HangAfterCreate`] for the next POST that gets as far as applying; then `Normal`.
    HangOnce,
    /// Answer 500 without creating anything.
    Fail500,
    /// Apply the request, then close the connection without writing a response.
    DropAfterCreate,
    /// Apply the next POST, answer it only after this long (a slow target), then `Normal`.
    SlowOnce(std::time::Duration),
    /// Apply the next POST, then answer it 500 (a failure after commit), then `Normal`.
    Fail500AfterCreateOnce,
}

/// Handle to the API's shared state; clones share it.
#[derive(Clone, Debug)]
pub struct InvoiceApi {
    inner: Arc<Mutex<Inner>>,
    token: Option<Arc<str>>,
    /// Closes (`changed()` fails) when the [`InvoiceApiHandle`] is dropped.
    stopped: watch::Receiver<()>,
}

#[derive(Debug, Default)]
struct Inner {
    invoices: Vec<Invoice>,
    /// Idempotency-Key → position in `invoices` (a lookup per request, also under load).
    by_key: std::collections::HashMap<String, usize>,
    requests: Vec<SeenRequest>,
    mode: Mode,
}

/// A running API. It serves until this handle is dropped.
#[derive(Debug)]
pub struct InvoiceApiHandle {
    pub addr: SocketAddr,
    pub state: InvoiceApi,
    /// Dropping the sender is the shutdown signal.
    _shutdown: watch::Sender<()>,
}

impl InvoiceApiHandle {
    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl InvoiceApi {
    /// Starts the API on `127.0.0.1:0` without authentication.
    pub async fn start() -> io::Result<InvoiceApiHandle> {
        Self::serve(None).await
    }

    /// Starts the API on `127.0.0.1:0`; every request must carry `Authorization: Bearer <token>`.
    pub async fn start_with_token(token: impl Into<String>) -> io::Result<InvoiceApiHandle> {
        Self::serve(Some(token.into())).await
    }

    async fn serve(token: Option<String>) -> io::Result<InvoiceApiHandle> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        Self::serve_on(listener, token)
    }

    /// Starts the API on `127.0.0.1:0` behind TLS (`postern demo`'s https scene), without
    /// authentication. Its handle's [`InvoiceApiHandle::url`] says `http://`; build an
    /// `https://` URL from its address.
    pub async fn start_tls(config: Arc<rustls::ServerConfig>) -> io::Result<InvoiceApiHandle> {
        let tcp = TcpListener::bind("127.0.0.1:0").await?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        Self::serve_on(TlsAccepting { tcp, acceptor }, None)
    }

    /// Starts the API on `listener` (e.g. one that speaks TLS), with an optional bearer token.
    /// Its handle's [`InvoiceApiHandle::url`] says `http://`; a TLS caller builds its own.
    pub fn serve_on<L>(listener: L, token: Option<String>) -> io::Result<InvoiceApiHandle>
    where
        L: axum::serve::Listener<Addr = SocketAddr>,
        L::Io: Unpin,
    {
        let addr = listener.local_addr()?;
        let (shutdown, stopped) = watch::channel(());
        let api = InvoiceApi {
            inner: Arc::default(),
            token: token.map(Arc::from),
            stopped,
        };
        let app = Router::new()
            .route("/invoices", get(list_or_find).post(create))
            .route("/invoices/{id}", get(show))
            .route("/echo/escaped", post(echo::escaped))
            .route("/echo/base64", post(echo::base64))
            .layer(middleware::from_fn_with_state(
                api.clone(),
                record_and_authorize,
            ))
            .with_state(api.clone())
            .into_make_service_with_connect_info::<Kill>();
        let stopped = api.stopped_signal();
        // axum documents that serving never fails (accept errors are retried), so the result
        // is ignored.
        let server = axum::serve(KillableListener(listener), app).with_graceful_shutdown(stopped);
        tokio::spawn(server.into_future());
        Ok(InvoiceApiHandle {
            addr,
            state: api,
            _shutdown: shutdown,
        })
    }

    /// Every invoice created, in creation order.
    pub fn invoices(&self) -> Vec<Invoice> {
        self.lock().invoices.clone()
    }

    /// How many invoices exist for `customer`: the effects by business key.
    pub fn count_for(&self, customer: &str) -> usize {
        self.lock()
            .invoices
            .iter()
            .filter(|i| i.customer == customer)
            .count()
    }

    /// Every request received, in arrival order, including refused ones.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.lock().requests.clone()
    }

    /// Sets the failure injection for the next `POST /invoices` requests.
    pub fn set_mode(&self, mode: Mode) {
        self.lock().mode = mode;
    }

    /// Forgets every invoice and request and returns to [`Mode::Normal`]; ids restart at `inv_1`.
    pub fn reset(&self) {
        *self.lock() = Inner::default();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves when the handle is dropped.
    fn stopped_signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.stopped.clone();
        async move { while stopped.changed().await.is_ok() {} }
    }
}

impl Inner {
    fn find_by_key(&self, key: &str) -> Option<Invoice> {
        self.by_key.get(key).map(|&i| self.invoices[i].clone())
    }
}

#[derive(Deserialize)]
struct NewInvoice {
    customer: String,
    amount: i64,
    currency: Option<String>,
}

#[derive(Deserialize)]
struct ListQuery {
    idempotency_key: Option<String>,
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Records every request, then refuses it with 401 unless it carries the bearer token.
async fn record_and_authorize(State(api): State<InvoiceApi>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
    };
    let authorization = header(&parts.headers, "authorization");
    api.lock().requests.push(SeenRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        idempotency_key: header(&parts.headers, "idempotency-key"),
        has_authorization: authorization.is_some(),
        traceparent: header(&parts.headers, "traceparent"),
        body: String::from_utf8_lossy(&bytes).into_owned(),
    });
    if let Some(token) = &api.token {
        if authorization.as_deref() != Some(&format!("Bearer {token}")) {
            return error(StatusCode::UNAUTHORIZED, "unauthorized");
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

async fn create(
    State(api): State<InvoiceApi>,
    ConnectInfo(kill): ConnectInfo<Kill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if api.lock().mode == Mode::Fail500 {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "injected failure");
    }
    let new: NewInvoice = match serde_json::from_slice(&body) {
        Ok(new) => new,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("invalid body: {e}")),
    };
    if new.amount < 0 {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "amount must be positive");
    }
    let key = header(&headers, "idempotency-key");
    let (status, invoice, mode) = {
        let mut inner = api.lock();
        let mode = inner.mode;
        if matches!(
            mode,
            Mode::HangOnce | Mode::SlowOnce(_) | Mode::Fail500AfterCreateOnce
        ) {
            inner.mode = Mode::Normal;
        }
        match key.as_deref().and_then(|k| inner.find_by_key(k)) {
            Some(invoice) => (StatusCode::OK, invoice, mode),
            None => {
                let invoice = Invoice {
                    id: format!("inv_{}", inner.invoices.len() + 1),
                    customer: new.customer,
                    amount: new.amount,
                    currency: new.currency.unwrap_or_else(|| "USD".to_owned()),
                    idempotency_key: key,
                };
                if let Some(k) = &invoice.idempotency_key {
                    let at = inner.invoices.len();
                    inner.by_key.insert(k.clone(), at);
                }
                inner.invoices.push(invoice.clone());
                (StatusCode::CREATED, invoice, mode)
            }
        }
    };
    match mode {
        Mode::HangAfterCreate | Mode::HangOnce => {
            // Never answer; on shutdown close the connection instead of answering late.
            api.stopped_signal().await;
            kill.fire();
        }
        Mode::DropAfterCreate => kill.fire(),
        Mode::SlowOnce(delay) => tokio::time::sleep(delay).await,
        Mode::Fail500AfterCreateOnce => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "injected failure after commit",
            )
        }
        Mode::Normal | Mode::Fail500 => {}
    }
    (status, Json(invoice)).into_response()
}

async fn list_or_find(State(api): State<InvoiceApi>, Query(q): Query<ListQuery>) -> Response {
    let inner = api.lock();
    if let Some(key) = q.idempotency_key {
        return match inner.find_by_key(&key) {
            Some(invoice) => (StatusCode::OK, Json(invoice)).into_response(),
            None => error(StatusCode::NOT_FOUND, "not found"),
        };
    }
    Json(json!({ "invoices": inner.invoices })).into_response()
}

async fn show(State(api): State<InvoiceApi>, Path(id): Path<String>) -> Response {
    match api.lock().invoices.iter().find(|i| i.id == id) {
        Some(invoice) => (StatusCode::OK, Json(invoice.clone())).into_response(),
        None => error(StatusCode::NOT_FOUND, "not found"),
    }
}

/// Per-connection switch: once fired, the connection refuses all I/O, so the server drops it
/// without a byte of response.
#[derive(Clone, Debug, Default)]
struct Kill(Arc<AtomicBool>);

/// A TCP listener whose connections are TLS, for `axum::serve`. Handshakes run one after
/// another (enough for a demo); one that fails or takes over 10 s is dropped.
struct TlsAccepting {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsAccepting {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            };
            let handshake = self.acceptor.accept(tcp);
            if let Ok(Ok(tls)) =
                tokio::time::timeout(std::time::Duration::from_secs(10), handshake).await
            {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

impl Kill {
    fn fire(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    fn fired(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

struct KillableListener<L>(L);

struct KillableConn<Io>(Io, Kill);

impl<L> axum::serve::Listener for KillableListener<L>
where
    L: axum::serve::Listener<Addr = SocketAddr>,
    L::Io: Unpin,
{
    type Io = KillableConn<L::Io>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.0.accept().await;
        (KillableConn(io, Kill::default()), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

impl<L> Connected<axum::serve::IncomingStream<'_, KillableListener<L>>> for Kill
where
    L: axum::serve::Listener<Addr = SocketAddr>,
    L::Io: Unpin,
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, KillableListener<L>>) -> Self {
        stream.io().1.clone()
    }
}

impl<Io: Unpin> KillableConn<Io> {
    /// The stream, unless the switch was fired.
    fn live(self: Pin<&mut Self>) -> io::Result<Pin<&mut Io>> {
        let this = self.get_mut();
        if this.1.fired() {
            return Err(io::ErrorKind::ConnectionAborted.into());
        }
        Ok(Pin::new(&mut this.0))
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for KillableConn<Io> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.live()?.poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for KillableConn<Io> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.live()?.poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.live()?.poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

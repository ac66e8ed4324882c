//! TLS servers that misbehave on purpose, one script step per request, so a test can close or
//! reset a kept-alive connection at the moment it wants.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::support::read_request;

/// What the server does with the next request on a connection.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Read it, answer 200 and keep the connection open.
    Answer,
    /// Read it, answer 200, then close the connection (TLS close_notify and FIN) after the
    /// delay, while the client holds it idle in its pool.
    AnswerThenCloseAfter(Duration),
    /// As [`Step::AnswerThenCloseAfter`], and stop accepting connections too (the target is
    /// down).
    AnswerThenGoDown(Duration),
    /// Wait for the first bytes of the request, then reset the connection (RST) without
    /// reading the rest or answering.
    ResetWhenItStarts,
    /// Wait for the first bytes of the request, then close the connection (FIN).
    CloseWhenItStarts,
    /// Read it whole, then reset the connection without answering.
    ResetAfterReading,
}

/// Counters a test asserts on.
#[derive(Default, Debug)]
pub struct Counts {
    /// TCP connections accepted.
    pub connections: AtomicUsize,
    /// Requests whose first bytes arrived (whole or not).
    pub started: AtomicUsize,
    /// Requests read whole.
    pub read: AtomicUsize,
}

/// A TLS server on 127.0.0.1 that follows `script`: step `i` applies to the `i`-th request it
/// receives (over all connections); after the script, every request is answered.
pub struct ScriptedTlsServer {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
}

impl ScriptedTlsServer {
    pub async fn start(config: Arc<rustls::ServerConfig>, script: Vec<Step>) -> ScriptedTlsServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Counts::default());
        let script = Arc::new(Mutex::new(script.into_iter()));
        let acceptor = TlsAcceptor::from(config);
        let (c, s) = (counts.clone(), script.clone());
        tokio::spawn(async move {
            let down = Arc::new(tokio::sync::Notify::new());
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = down.notified() => return,
                };
                let (tcp, _) = accepted.unwrap();
                c.connections.fetch_add(1, Ordering::SeqCst);
                let Ok(tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let (c, s, down) = (c.clone(), s.clone(), down.clone());
                tokio::spawn(serve_connection(tls, c, s, down));
            }
        });
        ScriptedTlsServer { addr, counts }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    pub fn started(&self) -> usize {
        self.counts.started.load(Ordering::SeqCst)
    }

    pub fn read(&self) -> usize {
        self.counts.read.load(Ordering::SeqCst)
    }
}

type Script = Arc<Mutex<std::vec::IntoIter<Step>>>;

async fn serve_connection(
    mut tls: TlsStream<TcpStream>,
    counts: Arc<Counts>,
    script: Script,
    down: Arc<tokio::sync::Notify>,
) {
    loop {
        // The first byte of the next request (or the client closing the connection).
        let mut first = [0u8; 1];
        if !matches!(tls.read(&mut first).await, Ok(1)) {
            return;
        }
        counts.started.fetch_add(1, Ordering::SeqCst);
        let step = script.lock().unwrap().next().unwrap_or(Step::Answer);
        match step {
            Step::ResetWhenItStarts => return reset(tls),
            Step::CloseWhenItStarts => {
                let _ = tls.shutdown().await;
                return;
            }
            _ => {}
        }
        read_request(&mut tls).await;
        counts.read.fetch_add(1, Ordering::SeqCst);
        let close_after = match step {
            Step::ResetAfterReading => return reset(tls),
            Step::AnswerThenCloseAfter(delay) => Some(delay),
            Step::AnswerThenGoDown(delay) => {
                down.notify_one();
                Some(delay)
            }
            _ => None,
        };
        let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}";
        tls.write_all(answer.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        if let Some(delay) = close_after {
            tokio::time::sleep(delay).await;
            let _ = tls.shutdown().await;
            return;
        }
    }
}

/// Drops the connection with an RST (linger 0) instead of a FIN.
fn reset(tls: TlsStream<TcpStream>) {
    let (tcp, _) = tls.into_inner();
    tcp.set_zero_linger().unwrap();
    drop(tcp);
}

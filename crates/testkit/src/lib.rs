//! Test support shared by Postern's test binaries and benchmarks (never a dependency of a
//! library crate or of the binary): a throw-away certificate authority ([`TestCa`], the demo
//! crate's, re-exported: the one place certificates are made, for `postern demo`'s https scene
//! and every test) and an axum listener that speaks TLS ([`TlsListener`]), so tests dial real
//! TLS servers on 127.0.0.1. [`sshd`] starts a real OpenSSH server with a
//! throw-away config and a proxy that cuts connections, for the SSH channel's tests;
//! [`balancer`] a real HAProxy, [`postgres`] a private PostgreSQL cluster and fresh databases
//! on the machine's cluster that no run leaves behind, (feature `browser`) a headless
//! Chromium over WebDriver, and [`unprivileged`]: what the sandbox's user (`nobody`) may run
//! and write. [`leaks`] looks for a secret in what a test got back, escaped or base64-encoded.

pub mod balancer;
#[cfg(feature = "browser")]
pub mod browser;
#[cfg(feature = "issuer")]
pub mod issuer;
pub mod leaks;
pub mod ports;
pub mod postgres;
pub mod sshd;
pub mod unprivileged;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

pub use postern_demo::ca::{provider, Issued, TestCa, Validity};

/// A TCP listener whose connections are TLS, for `axum::serve`. Handshakes run concurrently
/// (each on its own task), so a slow or failing one never holds up the others; a connection
/// whose handshake fails is dropped and counted ([`TlsListener::failed_handshakes`]).
pub struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    failed: Arc<AtomicUsize>,
}

impl TlsListener {
    /// Listens on `127.0.0.1:0` with `config`.
    pub async fn bind(config: Arc<ServerConfig>) -> io::Result<TlsListener> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        Ok(TlsListener::over(listener, config))
    }

    /// TLS on an already bound listener.
    pub fn over(listener: TcpListener, config: Arc<ServerConfig>) -> TlsListener {
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let (tx, ready) = mpsc::channel(256);
        let failed = Arc::new(AtomicUsize::new(0));
        let failures = failed.clone();
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            while let Ok((tcp, peer)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let (acceptor, tx, failures) = (acceptor.clone(), tx.clone(), failures.clone());
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(tls) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Err(_) => {
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        TlsListener {
            addr,
            ready,
            failed,
        }
    }

    /// How many handshakes failed so far (shared: stays readable after `axum::serve` took the
    /// listener).
    pub fn failed_handshakes(&self) -> Arc<AtomicUsize> {
        self.failed.clone()
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accepting task ended (its listener failed): serve nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

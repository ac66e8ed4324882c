//! Where the gateway listens: MCP, `/ops` and the console on its address (over TLS, its
//! certificate reloaded on SIGHUP, or plain HTTP, with a warning when other machines can reach
//! it), `/metrics` on an address of its own, and the stop signal that ends them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use postern_core::config::ListenerTls;
use postern_front::listener::tls::{ServerIdentity, TlsHandshake};
use postern_front::listener::{Handshake, ListenerLimits, PlainTcp};
use postern_front::Tokens;
use postern_pipeline::Gateway;

use crate::serve::ServeArgs;

/// Serves MCP, `/ops` and the console over HTTP(S) until SIGINT or SIGTERM, then stops the
/// console's webhooks.
pub(super) async fn serve_on_listener(
    a: &ServeArgs,
    tokens: Tokens,
    console: Option<postern_console::ConsoleSetup>,
    gateway: &Arc<Gateway>,
) -> Result<()> {
    let listen = a
        .listen
        .clone()
        .unwrap_or_else(|| gateway.config().gateway.listen.clone());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let stop = StopSignal::listen();
    let addr = listener.local_addr()?;
    let scheme = if gateway.config().gateway.tls.is_some() {
        "https"
    } else {
        "http"
    };
    gateway
        .notices()
        .set_console_base(&format!("{scheme}://{addr}"));
    let console = console.map(|setup| postern_console::Console::new(gateway.clone(), setup));
    let stop_webhooks = tokio_util::sync::CancellationToken::new();
    if let Some(c) = &console {
        c.start_webhooks(stop_webhooks.clone())?;
    }
    let app = Served {
        gateway,
        tokens,
        console: console.as_ref(),
    };
    match &gateway.config().gateway.tls {
        Some(files) => {
            let files = ListenerFiles::of(files, &crate::config_dir(&a.config));
            let identity = files.read()?;
            tracing::info!("postern: TLS {}", files.describe(&identity));
            let asks = gateway
                .config()
                .actors
                .iter()
                .any(|a| a.client_cert_fingerprint.is_some());
            let handshake = TlsHandshake::new(identity, asks);
            reload_on_sighup(files, handshake.clone());
            println!("postern listening on https://{addr}/mcp");
            serve_http(listener, handshake, app, stop).await;
        }
        None => {
            if !addr.ip().is_loopback() {
                tracing::warn!("{}", plain_http_warning(addr));
            }
            println!("postern listening on http://{addr}/mcp");
            serve_http(listener, PlainTcp, app, stop).await;
        }
    }
    stop_webhooks.cancel();
    Ok(())
}

/// `[telemetry] metrics_listen`: `/metrics` without a token on its own address.
pub(super) async fn serve_metrics(addr: &str, gateway: &Arc<Gateway>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding telemetry.metrics_listen {addr}"))?;
    tracing::info!(
        "postern: metrics on http://{}/metrics",
        listener.local_addr()?
    );
    let gateway = gateway.clone();
    tokio::spawn(async move {
        if let Err(e) = postern_front::ops::serve_metrics_only(listener, gateway).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(())
}

/// What the listener serves: MCP and `/ops` with these tokens, and the console.
struct Served<'a> {
    gateway: &'a Arc<Gateway>,
    tokens: Tokens,
    console: Option<&'a postern_console::Console>,
}

/// Serves MCP, `/ops` and the console on `listener` until SIGINT or SIGTERM.
async fn serve_http<H: Handshake>(
    listener: tokio::net::TcpListener,
    handshake: H,
    served: Served<'_>,
    stop: StopSignal,
) {
    let gateway = served.gateway;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let vouch = postern_front::vouch(gateway, &served.tokens);
    let mut app = postern_front::router(gateway.clone(), served.tokens, shutdown.clone());
    if let Some(console) = served.console {
        app = app.merge(console.router());
    }
    let limits = ListenerLimits::of(&gateway.config().gateway);
    postern_front::listener::serve(listener, handshake, app, limits, vouch, async move {
        stop.wait().await;
        // Open streams (a session's GET stream, a live replay) end now instead of holding
        // the stop until their clients leave.
        shutdown.cancel();
    })
    .await;
}

/// Said at start-up when the listener is plain HTTP on an address other machines can reach.
fn plain_http_warning(addr: std::net::SocketAddr) -> String {
    format!(
        "postern: WARNING: listening on {addr} over plain HTTP, reachable from other machines: \
         every actor's bearer token and every call and answer cross the network unencrypted. \
         Set [gateway] tls = {{ cert = \"…\", key = \"…\" }}, or listen on 127.0.0.1 behind a \
         TLS-terminating proxy."
    )
}

/// The listener's certificate and key files, resolved against the config's directory.
struct ListenerFiles {
    cert: PathBuf,
    key: PathBuf,
}

impl ListenerFiles {
    fn of(tls: &ListenerTls, dir: &Path) -> ListenerFiles {
        ListenerFiles {
            cert: dir.join(&tls.cert),
            key: dir.join(&tls.key),
        }
    }

    /// Reads and checks both files; every error names the file it is about.
    fn read(&self) -> Result<ServerIdentity> {
        let cert = std::fs::read(&self.cert).with_context(|| {
            format!(
                "reading the TLS certificate {} ([gateway] tls.cert)",
                self.cert.display()
            )
        })?;
        let key = crate::keys::read_private(&self.key, "the TLS key ([gateway] tls.key)")?;
        ServerIdentity::from_pem(&cert, key.as_bytes(), crate::now()).map_err(|e| {
            use postern_front::listener::tls::ListenerTlsError as E;
            let file = match e {
                E::BadKey | E::KeyMismatch => &self.key,
                _ => &self.cert,
            };
            anyhow::anyhow!("[gateway] tls: {}: {e}", file.display())
        })
    }

    fn describe(&self, identity: &ServerIdentity) -> String {
        let validity = identity.validity();
        format!(
            "certificate {} ({}), valid until {}",
            self.cert.display(),
            identity.fingerprint(),
            validity.not_after
        )
    }
}

/// Replaces the listener's certificate on every SIGHUP with what the files hold then; a pair
/// that does not load (a key for another certificate, an expired certificate) is refused and
/// the current certificate kept. Open connections are never touched.
fn reload_on_sighup(files: ListenerFiles, handshake: TlsHandshake) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        // Registered before the listening line is printed, so a SIGHUP sent once the gateway
        // says it listens reloads rather than kills it.
        let Ok(mut hangup) = signal(SignalKind::hangup()) else {
            tracing::warn!(
                "postern: cannot listen for SIGHUP: the TLS certificate will not be reloaded"
            );
            return;
        };
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                match files.read() {
                Ok(identity) => {
                    tracing::info!("postern: SIGHUP: reloaded the TLS {}", files.describe(&identity));
                    handshake.replace(identity);
                }
                Err(e) => tracing::warn!(
                    "postern: SIGHUP: kept the current TLS certificate, the new one is refused: {e:#}"
                ),
            }
            }
        });
    }
}

/// SIGINT or SIGTERM.
/// SIGINT or SIGTERM, listened for from the moment it is made: made before the gateway says
/// it listens, so a stop sent right after that line is never lost (a process started in the
/// background by a non-interactive shell inherits SIGINT ignored until a handler is installed).
struct StopSignal {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl StopSignal {
    fn listen() -> StopSignal {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            StopSignal {
                signals: signal(SignalKind::interrupt())
                    .and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
                    .ok(),
            }
        }
        #[cfg(not(unix))]
        StopSignal {}
    }

    async fn wait(self) {
        #[cfg(unix)]
        if let Some((mut int, mut term)) = self.signals {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

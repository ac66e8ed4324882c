//! The bridge's client session with the remote gateway: opened once at start (so a wrong URL or
//! token is reported then), opened anew when it is lost, and closed in the background.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rmcp::service::RunningService;
use rmcp::transport::common::client_side_sse::NeverRetry;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{Peer, RoleClient, ServiceExt};

use crate::connect::failure::{init_chain, Failure};
use crate::connect::passthrough::BridgeClient;
use crate::connect::remote::Remote;
use crate::connect::{Bridge, Inner, Timing, FIRST_PAUSE, MAX_PAUSE};

/// One client session with the remote gateway.
pub(super) struct Session {
    generation: u64,
    service: RunningService<RoleClient, BridgeClient>,
}

impl Bridge {
    /// Connects once (retrying transport failures for a short bounded time) so that a wrong
    /// URL or token is reported at start, not at the agent's first call.
    pub(super) async fn start(remote: Remote, timing: Timing, verbose: bool) -> Result<Bridge> {
        let deadline = Instant::now() + timing.recovery.min(Duration::from_secs(15));
        let mut pause = FIRST_PAUSE;
        let client = BridgeClient::default();
        let service = loop {
            match tokio::time::timeout(timing.attempt, connect(&remote, &client)).await {
                Ok(Ok(s)) => break s,
                Ok(Err(e)) if e.auth_challenge().is_some() => bail!(
                    "{} refused the token (HTTP 401): check the token in the environment",
                    remote.url
                ),
                // Not a passing fault: trying again would only repeat it.
                Ok(Err(e)) if init_chain(&e).contains("invalid peer certificate") => bail!(
                    "{} presented a TLS certificate this bridge does not trust ({}); if a \
                     private CA signed it, name that CA's PEM file with --ca-file",
                    remote.url,
                    init_chain(&e)
                ),
                Ok(Err(e)) if Instant::now() + pause >= deadline => {
                    bail!(
                        "cannot open an MCP session with {}: {}",
                        remote.url,
                        init_chain(&e)
                    )
                }
                Err(_) if Instant::now() + pause >= deadline => bail!(
                    "cannot open an MCP session with {}: no answer within {:?}",
                    remote.url,
                    timing.attempt
                ),
                _ => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        };
        let instructions = service.peer_info().and_then(|i| i.instructions.clone());
        let capabilities = service
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        let run_id = format!("connect:{}", random_hex());
        Ok(Bridge(Arc::new(Inner {
            remote,
            timing,
            verbose,
            session: tokio::sync::Mutex::new(Some(Session {
                generation: 0,
                service,
            })),
            generations: AtomicU64::new(1),
            tools: Mutex::new(None),
            instructions,
            capabilities,
            client,
            run_id,
            requests: AtomicU64::new(1),
        })))
    }

    /// The current session's peer, building a new session if there is none or it is closed.
    pub(super) async fn peer(&self, budget: Duration) -> Result<(u64, Peer<RoleClient>), Failure> {
        let mut slot = self.0.session.lock().await;
        if let Some(s) = slot.as_ref() {
            if !s.service.is_transport_closed() {
                return Ok((s.generation, s.service.peer().clone()));
            }
        }
        if let Some(old) = slot.take() {
            retire(old);
        }
        let built = tokio::time::timeout(budget, connect(&self.0.remote, &self.0.client)).await;
        let service = match built {
            Ok(Ok(s)) => s,
            Ok(Err(e)) if e.auth_challenge().is_some() => {
                return Err(Failure::Unauthorized(format!(
                    "{} refused the bridge's token (HTTP 401)",
                    self.0.remote.url
                )))
            }
            Ok(Err(e)) => {
                return Err(Failure::Lost {
                    reason: format!("cannot open a session: {}", init_chain(&e)),
                    sent: false,
                })
            }
            Err(_) => {
                return Err(Failure::Lost {
                    reason: "cannot open a session: no answer".into(),
                    sent: false,
                })
            }
        };
        let generation = self.0.generations.fetch_add(1, Ordering::Relaxed);
        if self.0.verbose {
            crate::messages::say(format_args!(
                "postern connect: new session with {}",
                self.0.remote.url
            ));
        }
        let peer = service.peer().clone();
        *slot = Some(Session {
            generation,
            service,
        });
        Ok((generation, peer))
    }

    /// Drops session `generation` if it is still the current one (the next call builds anew).
    pub(super) async fn discard(&self, generation: u64) {
        let mut slot = self.0.session.lock().await;
        if slot.as_ref().is_some_and(|s| s.generation == generation) {
            if let Some(old) = slot.take() {
                retire(old);
            }
        }
    }

    pub(super) async fn close(&self) {
        if let Some(s) = self.0.session.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(3), s.service.cancel()).await;
        }
    }
}

/// Opens one client session with the gateway. Resumption of a broken response stream is
/// bounded: one immediate `GET` with `Last-Event-ID` (rmcp's default policy retries forever,
/// waiting the server's 3 s `retry:` each time); after that the call is re-issued instead.
async fn connect(
    remote: &Remote,
    client: &BridgeClient,
) -> Result<RunningService<RoleClient, BridgeClient>, rmcp::service::ClientInitializeError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(remote.url.clone())
        .auth_header(remote.bearer().await)
        .reinit_on_expired_session(true);
    config.retry_config = Arc::new(NeverRetry::default());
    let transport = StreamableHttpClientTransport::with_client(remote.http.clone(), config);
    let transport =
        postern_channels::mcp::CountedProgress::new(transport, client.count_progress_read());
    client.clone().serve(transport).await
}

/// Closes a session in the background (its `DELETE` must not hold up the caller).
fn retire(old: Session) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), old.service.cancel()).await;
    });
}

fn random_hex() -> String {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}

//! One upstream's link, supervised: connect (spawn or dial), initialise, read the tool list,
//! keep it fresh, and start again with backoff when the link ends.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::{ClientRequest, PingRequest, Tool};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::{Peer, RoleClient};
use serde_json::Value;
use tokio::sync::{broadcast, watch, Notify};
use tokio_util::sync::CancellationToken;

use super::client::{Askers, LinkClient, UpstreamEvent};
use super::process::Process;
use super::progress::ProgressRoutes;
use super::reason;
use crate::http::TlsProfile;
use crate::secret::{Credential, Secret};
use connect::connect;

mod connect;

/// How to reach an upstream, with its references resolved.
#[derive(Clone, Debug)]
pub struct UpstreamSpec {
    pub name: String,
    pub transport: UpstreamTransport,
    /// How long a call waits for a link that is (re)connecting before it fails, sending nothing.
    pub startup_timeout: Duration,
    /// How long a request passed through (a resource read, a prompt) waits for its answer.
    pub request_timeout: Duration,
}

#[derive(Clone, Debug)]
pub enum UpstreamTransport {
    Stdio {
        program: String,
        args: Vec<String>,
        /// The upstream's own variables (secrets among them), over the inherited safe base.
        env: BTreeMap<String, Secret>,
        cwd: Option<PathBuf>,
        /// What the program is started through (the gateway's sandbox); `None`: directly.
        launcher: Option<Launcher>,
    },
    Http {
        url: String,
        credential: Option<Credential>,
        tls: Option<Arc<TlsProfile>>,
    },
}

/// A program a stdio upstream's command is started through, as `LAUNCHER ARGS… PROGRAM
/// PROGRAM_ARGS…`: it confines itself and then executes the program, which inherits that (the
/// gateway's own binary, `sandbox-exec SPEC --`). What it enforces is not this crate's
/// business; the child is the program's process all the same (same pid, same pipes).
#[derive(Clone, Debug)]
pub struct Launcher {
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
}

/// One tool as the upstream lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    /// The upstream's annotations (`readOnlyHint`, …), as sent: untrusted hints.
    pub annotations: Option<Value>,
    /// The upstream's display title and the schema of its `structuredContent`, as listed.
    pub title: Option<String>,
    pub output_schema: Option<Value>,
}

impl UpstreamTool {
    fn of(tool: &Tool) -> UpstreamTool {
        UpstreamTool {
            name: tool.name.to_string(),
            description: tool.description.as_deref().unwrap_or_default().to_string(),
            input_schema: Value::Object(tool.input_schema.as_ref().clone()),
            annotations: tool
                .annotations
                .as_ref()
                .and_then(|a| serde_json::to_value(a).ok()),
            title: tool.title.clone(),
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|s| Value::Object(s.as_ref().clone())),
        }
    }
}

/// Whether the link is up, and what the upstream lists.
#[derive(Clone, Debug)]
pub struct LinkState {
    /// `Err(why)` while the upstream cannot be reached.
    pub up: Result<(), String>,
    pub tools: Arc<Vec<UpstreamTool>>,
    /// Counts tool lists read; a change of list bumps it.
    pub generation: u64,
    /// A stdio upstream's process (the leader of its process group) while it runs.
    pub pid: Option<u32>,
}

/// One upstream MCP server and its supervised link.
pub struct Upstream {
    name: String,
    /// The names of the variables a stdio upstream's process receives (`None` over HTTP).
    environment: Option<Vec<String>>,
    pub(super) startup_timeout: Duration,
    pub(super) request_timeout: Duration,
    state: watch::Sender<LinkState>,
    peer: RwLock<Option<Peer<RoleClient>>>,
    pub(super) progress: ProgressRoutes,
    pub(super) askers: Askers,
    pub(super) events: broadcast::Sender<UpstreamEvent>,
    /// Why the last link was ended by its upstream's output (a message over the line bound).
    pub(super) broken: super::line_guard::Broken,
    /// Woken when a request finds the link's session gone or its server unreachable: the
    /// link is opened again at once instead of waiting for a request's timeout.
    pub(super) relink: Notify,
    /// Resources clients subscribed to, with how many subscriptions each: subscribed again
    /// upstream on every new connection.
    pub(super) subscriptions: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Notifications kept for a front that is slow to take them (older ones are dropped for it).
const EVENTS_BUFFERED: usize = 1024;

impl Upstream {
    /// Starts supervising the link to `spec` until `stop` fires (a stdio child is killed then).
    pub fn start(spec: UpstreamSpec, stop: CancellationToken) -> Arc<Upstream> {
        let (state, _) = watch::channel(LinkState {
            up: Err("connecting".into()),
            tools: Arc::default(),
            generation: 0,
            pid: None,
        });
        let environment = match &spec.transport {
            UpstreamTransport::Stdio { env, .. } => Some(super::environment_names(env)),
            UpstreamTransport::Http { .. } => None,
        };
        let upstream = Arc::new(Upstream {
            name: spec.name.clone(),
            environment,
            startup_timeout: spec.startup_timeout,
            request_timeout: spec.request_timeout,
            state,
            peer: RwLock::new(None),
            progress: Default::default(),
            askers: Default::default(),
            relink: Notify::new(),
            broken: Default::default(),
            events: broadcast::channel(EVENTS_BUFFERED).0,
            subscriptions: Default::default(),
        });
        tokio::spawn(supervise(upstream.clone(), spec, stop));
        upstream
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The names (never the values) of the variables a stdio upstream's process receives;
    /// `None` for an HTTP upstream.
    pub fn environment(&self) -> Option<&[String]> {
        self.environment.as_deref()
    }

    /// The link's state now; `subscribe` to watch it change.
    pub fn state(&self) -> LinkState {
        self.state.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<LinkState> {
        self.state.subscribe()
    }

    /// Waits (at most `startup_timeout`) until the link is up and its tools are listed;
    /// whether it is.
    pub async fn wait_up(&self) -> bool {
        let mut state = self.state.subscribe();
        let up = tokio::time::timeout(self.startup_timeout, state.wait_for(|s| s.up.is_ok()))
            .await
            .is_ok_and(|r| r.is_ok());
        up
    }

    /// The live peer, or why there is none.
    pub(super) fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let peer = self.peer.read().ok().and_then(|p| p.clone());
        match peer {
            Some(p) if !p.is_transport_closed() => Ok(p),
            _ => Err(match &self.state.borrow().up {
                Err(why) => format!("upstream {} is not running ({why})", self.name),
                Ok(()) => format!("upstream {} is not connected", self.name),
            }),
        }
    }

    fn set_down(&self, why: String) {
        if let Ok(mut p) = self.peer.write() {
            *p = None;
        }
        self.state.send_modify(|s| {
            s.up = Err(why);
            s.pid = None;
        });
    }
}

async fn supervise(upstream: Arc<Upstream>, spec: UpstreamSpec, stop: CancellationToken) {
    let mut backoff = FIRST_BACKOFF;
    let refresh = Arc::new(Notify::new());
    while !stop.is_cancelled() {
        let client = LinkClient {
            refresh: refresh.clone(),
            progress: upstream.progress.clone(),
            askers: upstream.askers.clone(),
            events: upstream.events.clone(),
        };
        let connected = tokio::select! {
            c = connect(&spec, client, upstream.broken.clone()) => c,
            () = stop.cancelled() => break,
        };
        match connected {
            Ok((running, mut process)) => {
                backoff = FIRST_BACKOFF;
                let pid = process.as_ref().map(Process::pid);
                upstream.state.send_modify(|s| s.pid = pid);
                // A new link: what ended the last one no longer explains anything.
                if let Ok(mut broken) = upstream.broken.lock() {
                    *broken = None;
                }
                let why = serve(&upstream, running, process.as_mut(), &refresh, &stop).await;
                // A stdio process (its whole group) lives exactly as long as its link.
                drop(process);
                upstream.set_down(why.clone());
                if !stop.is_cancelled() {
                    tracing::warn!(upstream = %spec.name, why = %why, "the upstream's link ended; reconnecting");
                }
            }
            Err(why) => {
                tracing::warn!(upstream = %spec.name, why = %why, retry_in = ?backoff, "the upstream could not be reached; trying again");
                upstream.set_down(why);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.cancelled() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    upstream.set_down("the gateway is stopping".into());
}

/// Keeps one connection: reads the tool list now and on every change notice, until the
/// connection ends. Returns why it ended.
async fn serve(
    upstream: &Upstream,
    running: RunningService<RoleClient, LinkClient>,
    mut process: Option<&mut Process>,
    refresh: &Notify,
    stop: &CancellationToken,
) -> String {
    let peer = running.peer().clone();
    let mut ct = Some(running.cancellation_token());
    let mut end = move || {
        if let Some(ct) = ct.take() {
            ct.cancel();
        }
    };
    let mut ended = tokio::spawn(running.waiting());
    if let Ok(mut p) = upstream.peer.write() {
        *p = Some(peer.clone());
    }
    upstream.subscribe_again(&peer).await;
    let mut list = true;
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if std::mem::take(&mut list) {
            match peer.list_all_tools().await {
                Ok(tools) => {
                    let tools: Vec<UpstreamTool> = tools.iter().map(UpstreamTool::of).collect();
                    upstream.state.send_modify(|s| {
                        s.up = Ok(());
                        if *s.tools != tools {
                            s.generation += 1;
                            s.tools = Arc::new(tools);
                        }
                    });
                }
                Err(e) => {
                    end();
                    return format!("tools/list failed: {}", reason::service(&e));
                }
            }
        }
        tokio::select! {
            () = refresh.notified() => list = true,
            _ = ping.tick() => {
                if let Some(why) = unreachable(&peer).await {
                    end();
                    let _ = (&mut ended).await;
                    return why;
                }
            }
            () = upstream.relink.notified() => {
                end();
                let _ = (&mut ended).await;
                return "a request found the link's session gone or its server unreachable".into();
            }
            // A wrapper (`npx`, `sh -c`) that exits leaves its server holding the pipes:
            // the link ends with it, and its process group is stopped.
            why = exited(process.as_deref_mut()) => {
                end();
                let _ = (&mut ended).await;
                return why;
            }
            r = &mut ended => {
                return match r {
                    Ok(Ok(rmcp::service::QuitReason::Closed)) => "the server closed the connection".into(),
                    Ok(Ok(reason)) => format!("the link ended ({reason:?})"),
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                };
            }
            () = stop.cancelled() => {
                end();
                let _ = (&mut ended).await;
                return "stopped".into();
            }
        }
    }
}

/// Why a stdio upstream's process exited, once it does; never for an HTTP upstream.
async fn exited(process: Option<&mut Process>) -> String {
    match process {
        Some(p) => p.exited().await,
        None => std::future::pending().await,
    }
}

/// How often an idle or busy link is checked with `ping`: a server that went away is seen
/// within this, even when no request finds it gone (an HTTP upstream has no connection of its
/// own to lose), so `postern status` and clients' tool lists say what is true.
const PING_EVERY: Duration = Duration::from_secs(2);
/// How long a ping may go unanswered before it is given up (and nothing is concluded: a busy
/// server is not a dead one).
const PING_PATIENCE: Duration = Duration::from_secs(5);

/// Why the link's server is known to be gone (it refused the ping untaken: a refused
/// connection, a session it no longer knows), or `None`.
async fn unreachable(peer: &Peer<RoleClient>) -> Option<String> {
    let ping = ClientRequest::PingRequest(PingRequest::default());
    let handle = match peer
        .send_request_with_option(ping, PeerRequestOptions::no_options())
        .await
    {
        Ok(handle) => handle,
        Err(e) => return Some(format!("the link closed ({})", reason::service(&e))),
    };
    match tokio::time::timeout(PING_PATIENCE, handle.rx).await {
        Ok(Ok(Err(e))) if super::tool::refused_before_sending(&e) => Some(format!(
            "the upstream did not take a ping ({})",
            reason::service(&e)
        )),
        _ => None,
    }
}

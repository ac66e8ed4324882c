//! The clients that hear what upstreams say outside answers: every client with a session (or
//! the stdio client) joins when it is initialised, and is told, when the upstream is one it
//! sees, of
//!
//! - `notifications/message` (the `logger` is the upstream's name, then `/` and its own logger
//!   when it gave one), at or above the level the client set with `logging/setLevel`;
//! - `notifications/resources/updated` of a resource it subscribed to;
//! - `notifications/resources|prompts/list_changed` from the upstream, and all three lists
//!   changed when the upstream comes up;
//! - `notifications/tools/list_changed` when the upstream's tools change, it goes down or up,
//!   or an operator accepts a changed tool (a withheld one is withheld on the change itself).
//!
//! A client whose transport closed is forgotten when the list is next walked; sends are
//! detached and bounded, so a slow client never holds the upstream's notifications back.
//! A sessionless (2026-07-28) client hears the changed lists on its `subscriptions/listen`
//! request, as long as that request is open (log messages and resource updates have no such
//! channel in that protocol).

// Logging is deprecated by SEP-2577, but the servers in the field use it.
#![allow(deprecated)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use postern_channels::mcp::{Upstream, UpstreamEvent};
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};
use tokio::sync::broadcast::error::RecvError;

use postern_pipeline::Gateway;

/// How long one notification may take to reach one client before it is given up.
const SEND_WAIT: Duration = Duration::from_secs(5);
/// Below this many members the closed ones are not swept.
const SWEEP_FLOOR: usize = 64;

/// What a member is told.
#[derive(Clone, Debug)]
enum Tell {
    Log(LoggingMessageNotificationParam),
    Updated(String),
    Tools,
    Resources,
    Prompts,
}

/// How a member hears: its session's peer, or (2026-07-28) the sink of a `subscriptions/listen`
/// request, which carries only the changed-list notifications its filter accepted.
#[derive(Clone)]
enum Ear {
    Peer(Peer<RoleServer>),
    Listen(SubscriptionSink),
}

impl Ear {
    fn is_closed(&self) -> bool {
        match self {
            Ear::Peer(peer) => peer.is_transport_closed(),
            // Removed by its `listen` when the request ends.
            Ear::Listen(_) => false,
        }
    }
}

struct Member {
    actor: String,
    ear: Ear,
    /// The least severe level it wants (`None`: every message).
    level: Option<u8>,
    /// Resources it subscribed to, by upstream.
    subscriptions: HashSet<(String, String)>,
}

#[derive(Default)]
struct Members {
    by_client: HashMap<String, Member>,
    /// The member count after the last sweep: the next one waits for twice as many.
    swept_at: usize,
}

/// The clients that hear upstream notifications.
pub(crate) struct Audience {
    gateway: Arc<Gateway>,
    members: Mutex<Members>,
}

/// The level of a rank (see [`rank`]).
pub(crate) fn level_of(rank: u8) -> LoggingLevel {
    match rank {
        0 => LoggingLevel::Debug,
        1 => LoggingLevel::Info,
        2 => LoggingLevel::Notice,
        3 => LoggingLevel::Warning,
        4 => LoggingLevel::Error,
        5 => LoggingLevel::Critical,
        6 => LoggingLevel::Alert,
        _ => LoggingLevel::Emergency,
    }
}

/// A level's rank, least severe first.
pub(crate) fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl Audience {
    /// An audience for `gateway`'s upstreams, watching each of them (and the operators'
    /// acceptances) for as long as the audience lives.
    pub(crate) fn start(gateway: Arc<Gateway>) -> Arc<Audience> {
        let audience = Arc::new(Audience {
            gateway: gateway.clone(),
            members: Mutex::default(),
        });
        for exposure in gateway.registry().upstreams() {
            tokio::spawn(watch(Arc::downgrade(&audience), exposure.upstream.clone()));
        }
        let mut accepted = gateway.upstream_tools().tool_view_changes();
        let weak = Arc::downgrade(&audience);
        tokio::spawn(async move {
            while accepted.changed().await.is_ok() {
                let Some(audience) = weak.upgrade() else {
                    break;
                };
                audience.tell(None, &Tell::Tools);
            }
        });
        audience
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client (a session, or the stdio client) joins, as `actor`.
    pub(crate) fn join(&self, client: String, actor: String, peer: Peer<RoleServer>) {
        self.enter(client, actor, Ear::Peer(peer));
    }

    /// A `subscriptions/listen` request hears changed lists until it ends (see [`Audience::leave`]).
    pub(crate) fn listen(&self, client: String, actor: String, sink: SubscriptionSink) {
        self.enter(client, actor, Ear::Listen(sink));
    }

    /// A listening request ended.
    pub(crate) fn leave(&self, client: &str) {
        self.lock().by_client.remove(client);
    }

    fn enter(&self, client: String, actor: String, ear: Ear) {
        let mut members = self.lock();
        if members.by_client.len() >= SWEEP_FLOOR.max(members.swept_at * 2) {
            self.sweep(&mut members);
            members.swept_at = members.by_client.len();
        }
        members.by_client.insert(
            client,
            Member {
                actor,
                ear,
                level: None,
                subscriptions: HashSet::new(),
            },
        );
    }

    /// The level a client set with `logging/setLevel`; the most verbose level any client of
    /// `upstream` wants, which the shared link asks of the upstream.
    pub(crate) fn set_level(
        &self,
        client: &str,
        level: LoggingLevel,
        upstream_actor: impl Fn(&str) -> bool,
    ) -> u8 {
        let mut members = self.lock();
        if let Some(m) = members.by_client.get_mut(client) {
            m.level = Some(rank(level));
        }
        members
            .by_client
            .values()
            .filter(|m| !m.ear.is_closed() && upstream_actor(&m.actor))
            .map(|m| m.level.unwrap_or(0))
            .min()
            .unwrap_or(rank(level))
    }

    /// Records (or drops) a client's subscription to `uri` of `upstream`; whether it changed.
    pub(crate) fn subscription(&self, client: &str, upstream: &str, uri: &str, on: bool) -> bool {
        let mut members = self.lock();
        let Some(m) = members.by_client.get_mut(client) else {
            return false;
        };
        let key = (upstream.to_string(), uri.to_string());
        if on {
            m.subscriptions.insert(key)
        } else {
            m.subscriptions.remove(&key)
        }
    }

    /// Forgets the members whose transport closed, and their subscriptions (unsubscribed
    /// upstream after the last client of a resource is gone).
    fn sweep(&self, members: &mut Members) {
        let closed: Vec<String> = members
            .by_client
            .iter()
            .filter(|(_, m)| m.ear.is_closed())
            .map(|(k, _)| k.clone())
            .collect();
        for client in closed {
            let Some(gone) = members.by_client.remove(&client) else {
                continue;
            };
            for (upstream, uri) in gone.subscriptions {
                self.unsubscribe_later(&upstream, uri);
            }
        }
    }

    /// Drops one client's subscription to `uri` upstream, in the background.
    pub(crate) fn unsubscribe_later(&self, upstream: &str, uri: String) {
        let link = self
            .gateway
            .registry()
            .upstreams()
            .iter()
            .find(|x| x.upstream.name() == upstream)
            .map(|x| x.upstream.clone());
        if let Some(link) = link {
            tokio::spawn(async move {
                if let Err(e) = link.unsubscribe_resource(&uri).await {
                    tracing::info!(upstream = %link.name(), uri = %uri, error = %e, "a resource subscription could not be dropped upstream");
                }
            });
        }
    }

    /// Tells every member that sees `upstream` (every member: `None`) of `what`.
    fn tell(&self, upstream: Option<&str>, what: &Tell) {
        let mut sees: HashMap<String, bool> = HashMap::new();
        let mut ears = Vec::new();
        {
            let mut members = self.lock();
            self.sweep(&mut members);
            for m in members.by_client.values() {
                let seen = match upstream {
                    None => true,
                    Some(name) => *sees.entry(m.actor.clone()).or_insert_with(|| {
                        self.gateway
                            .upstream_tools()
                            .upstreams_for(&m.actor)
                            .iter()
                            .any(|v| v.upstream.name() == name)
                    }),
                };
                let wanted = match what {
                    Tell::Log(p) => m.level.is_none_or(|l| rank(p.level) >= l),
                    Tell::Updated(uri) => upstream
                        .is_some_and(|u| m.subscriptions.contains(&(u.to_string(), uri.clone()))),
                    _ => true,
                };
                if seen && wanted {
                    ears.push(m.ear.clone());
                }
            }
        }
        for ear in ears {
            let what = what.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(SEND_WAIT, hear(ear, what)).await;
            });
        }
    }
}

/// Sends one notification to one member (a listening request takes only changed lists).
async fn hear(ear: Ear, what: Tell) {
    match ear {
        Ear::Peer(peer) => {
            let _ = match what {
                Tell::Log(p) => peer.notify_logging_message(p).await,
                Tell::Updated(uri) => {
                    peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await
                }
                Tell::Tools => peer.notify_tool_list_changed().await,
                Tell::Resources => peer.notify_resource_list_changed().await,
                Tell::Prompts => peer.notify_prompt_list_changed().await,
            };
        }
        Ear::Listen(sink) => {
            let _ = match what {
                Tell::Tools => sink.notify_tool_list_changed().await,
                Tell::Resources => sink.notify_resource_list_changed().await,
                Tell::Prompts => sink.notify_prompt_list_changed().await,
                Tell::Log(_) | Tell::Updated(_) => return,
            };
        }
    }
}

/// Passes one upstream's notifications and link changes to the audience while it lives.
async fn watch(audience: Weak<Audience>, upstream: Arc<Upstream>) {
    let mut state = upstream.subscribe();
    let mut events = upstream.events();
    let name = upstream.name().to_string();
    let seen = |s: &postern_channels::mcp::LinkState| (s.up.is_ok(), s.generation);
    let mut last = seen(&state.borrow());
    loop {
        let tell = tokio::select! {
            changed = state.changed() => {
                if changed.is_err() {
                    break;
                }
                let now = seen(&state.borrow_and_update());
                let came_up = now.0 && !last.0;
                let changed = now != last;
                last = now;
                match (came_up, changed) {
                    (true, _) => vec![Tell::Tools, Tell::Resources, Tell::Prompts],
                    (false, true) => vec![Tell::Tools],
                    (false, false) => Vec::new(),
                }
            }
            event = events.recv() => match event {
                Ok(UpstreamEvent::Log(mut p)) => {
                    p.logger = Some(match p.logger.take() {
                        Some(own) => format!("{name}/{own}"),
                        None => name.clone(),
                    });
                    vec![Tell::Log(p)]
                }
                Ok(UpstreamEvent::ResourceUpdated(uri)) => vec![Tell::Updated(uri)],
                Ok(UpstreamEvent::ResourcesChanged) => vec![Tell::Resources],
                Ok(UpstreamEvent::PromptsChanged) => vec![Tell::Prompts],
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(upstream = %name, missed, "upstream notifications came faster than clients took them; some were not passed on");
                    Vec::new()
                }
                Err(RecvError::Closed) => break,
            },
        };
        let Some(audience) = audience.upgrade() else {
            break;
        };
        for what in &tell {
            audience.tell(Some(&name), what);
        }
    }
}

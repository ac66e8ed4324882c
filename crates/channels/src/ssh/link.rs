//! SSH connections: one per (host, port, user, pinned host key, private key), multiplexing the
//! exec channels of every call that shares all five, reconnected when it fails; never shared
//! across credentials. A host whose key is not the pinned one is refused before
//! authentication, so nothing is ever sent to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;

use russh::client::{self, Handle, Msg};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use tokio::time::Instant;

use crate::secret::Secret;

/// Where a command goes and as whom.
pub struct Endpoint<'a> {
    pub host: &'a str,
    pub port: u16,
    pub user: &'a str,
    /// `ssh-ed25519 AAAA…` or `SHA256:…`.
    pub host_key: &'a str,
    pub key: &'a Secret,
    pub connect_timeout: Duration,
}

impl Endpoint<'_> {
    fn name(&self) -> String {
        format!("{}@{}:{}", self.user, self.host, self.port)
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct LinkKey {
    host: String,
    port: u16,
    user: String,
    host_key: String,
    // The key itself: connections are never shared across credentials. (Not `Debug`.)
    private_key: String,
}

type Link = Arc<tokio::sync::Mutex<Option<Arc<Handle<HostKeyCheck>>>>>;

/// The process's SSH connections.
#[derive(Default)]
pub struct SshLinks {
    links: Mutex<HashMap<LinkKey, Link>>,
}

/// How an exec ended.
pub struct ExecEnd {
    /// What the script wrote to stdout.
    pub stdout: Vec<u8>,
    /// Why it ended early (connection lost, deadline), if it did.
    pub cut: Option<String>,
}

impl SshLinks {
    /// Runs `script` with `sh -s` on the endpoint (the script on stdin, so that it is never
    /// in the host's process list) and collects its stdout until it ends or `deadline`.
    /// `Err` only when nothing can have reached the host: no connection, the host key is not
    /// the pinned one, authentication refused, no channel opened.
    pub async fn run(
        &self,
        ep: &Endpoint<'_>,
        script: &str,
        deadline: Instant,
    ) -> Result<ExecEnd, String> {
        let channel = self.open(ep).await?;
        // From here on, the host may have received it.
        let mut end = ExecEnd {
            stdout: Vec::new(),
            cut: None,
        };
        let sent = async {
            // No reply asked for: one small packet fewer from the server per command.
            channel.exec(false, "sh -s").await?;
            channel.data_bytes(script.as_bytes().to_vec()).await?;
            channel.eof().await
        };
        if let Err(e) = sent.await {
            end.cut = Some(format!(
                "the connection to {} failed while sending: {e}",
                ep.name()
            ));
            return Ok(end);
        }
        let mut channel = channel;
        loop {
            match tokio::time::timeout_at(deadline, channel.wait()).await {
                Err(_) => {
                    end.cut = Some("the deadline passed while connected".into());
                    return Ok(end);
                }
                Ok(None) => {
                    end.cut = Some(format!("the connection to {} ended", ep.name()));
                    return Ok(end);
                }
                Ok(Some(russh::ChannelMsg::Data { data })) => end.stdout.extend_from_slice(&data),
                Ok(Some(russh::ChannelMsg::Eof | russh::ChannelMsg::Close)) => return Ok(end),
                Ok(Some(_)) => {}
            }
        }
    }

    /// An exec channel on a live connection: the kept one, or a new one (once more if the
    /// kept one turns out dead).
    async fn open(&self, ep: &Endpoint<'_>) -> Result<russh::Channel<Msg>, String> {
        let key = LinkKey {
            host: ep.host.to_string(),
            port: ep.port,
            user: ep.user.to_string(),
            host_key: ep.host_key.to_string(),
            private_key: ep.key.expose().to_string(),
        };
        let link = {
            let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
            links.entry(key).or_default().clone()
        };
        let mut slot = link.lock().await;
        if let Some(handle) = slot.as_ref().filter(|h| !h.is_closed()) {
            if let Ok(channel) = handle.channel_open_session().await {
                return Ok(channel);
            }
        }
        *slot = None;
        let handle = Arc::new(connect(ep).await?);
        let channel = handle
            .channel_open_session()
            .await
            .map_err(|e| format!("{} opened no session channel: {e}", ep.name()))?;
        *slot = Some(handle);
        Ok(channel)
    }
}

/// Connects, checks the host key against the pin and authenticates with the private key.
async fn connect(ep: &Endpoint<'_>) -> Result<Handle<HostKeyCheck>, String> {
    let config = Arc::new(client::Config {
        inactivity_timeout: None,
        keepalive_interval: Some(Duration::from_secs(30)),
        nodelay: true,
        ..Default::default()
    });
    let offered = Arc::new(Mutex::new(None));
    let check = HostKeyCheck {
        pinned: ep.host_key.to_string(),
        offered: offered.clone(),
    };
    let connecting = async {
        let tcp = TcpStream::connect((ep.host, ep.port)).await?;
        tcp.set_nodelay(true)?;
        client::connect_stream(config, tcp, check).await
    };
    let mut handle = match tokio::time::timeout(ep.connect_timeout, connecting).await {
        Err(_) => {
            return Err(format!(
                "connecting to {} timed out after {:?}: nothing was sent",
                ep.name(),
                ep.connect_timeout
            ))
        }
        Ok(Err(e)) => {
            let offered = offered.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(match offered {
                Some(Mismatch::Refused(fp)) => format!(
                    "the host key of {}:{} is {fp}, not the pinned one: refused before any command (nothing was sent)",
                    ep.host, ep.port
                ),
                _ => format!("cannot connect to {}: {e}: nothing was sent", ep.name()),
            });
        }
        Ok(Ok(h)) => h,
    };
    let key = russh::keys::decode_secret_key(ep.key.expose(), None).map_err(|e| {
        format!("the ssh_key credential for {} is not an unencrypted OpenSSH private key ({}): nothing was sent", ep.name(), kind_of(&e))
    })?;
    let hash = handle
        .best_supported_rsa_hash()
        .await
        .ok()
        .flatten()
        .flatten();
    let auth = handle
        .authenticate_publickey(ep.user, PrivateKeyWithHashAlg::new(Arc::new(key), hash))
        .await
        .map_err(|e| {
            format!(
                "authenticating as {} failed: {e}: nothing was sent",
                ep.name()
            )
        })?;
    if !auth.success() {
        return Err(format!(
            "{}:{} refused the key for user {} (authentication failed): nothing was sent",
            ep.host, ep.port, ep.user
        ));
    }
    Ok(handle)
}

/// Whether `key` is a private key the channel can use (read at start-up, so that a bad key
/// is said then, not at the first call). The reason never quotes the key.
pub fn check_private_key(key: &Secret) -> Result<(), String> {
    russh::keys::decode_secret_key(key.expose(), None)
        .map(|_| ())
        .map_err(|e| format!("not an unencrypted OpenSSH private key: {}", kind_of(&e)))
}

/// A key error's kind, never its text (which might quote key material).
fn kind_of(e: &russh::keys::Error) -> &'static str {
    match e {
        russh::keys::Error::KeyIsEncrypted => {
            "it is encrypted, and passphrases are not supported yet"
        }
        _ => "it could not be decoded",
    }
}

#[derive(Clone)]
enum Mismatch {
    Refused(String),
}

/// Accepts the server only when its key is the pinned one.
struct HostKeyCheck {
    pinned: String,
    offered: Arc<Mutex<Option<Mismatch>>>,
}

impl client::Handler for HostKeyCheck {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let PublicKeyOrCertificate::PublicKey { key, .. } = server else {
            return Ok(false);
        };
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        let pinned = match self.pinned.strip_prefix("SHA256:") {
            Some(_) => self.pinned.trim_end_matches('=') == fingerprint.trim_end_matches('='),
            None => {
                PublicKey::from_openssh(&self.pinned).is_ok_and(|p| p.key_data() == key.key_data())
            }
        };
        if !pinned {
            *self.offered.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Mismatch::Refused(fingerprint));
        }
        Ok(pinned)
    }
}

//! The `[gateway]` table: listener, store, keys, limits and timeouts, with their defaults.
//! Errors are messages naming the key; the caller places them in the file.

use std::time::Duration;

use super::raw::{RawGateway, RawListenerTls};
use super::{GatewaySettings, ListenerTls, SecretRef};
use crate::duration::parse_duration;

/// The gateway settings, each key checked in the order the table is read, so that the first
/// error reported does not depend on how this function is arranged.
pub(super) fn settings(mut g: RawGateway) -> Result<GatewaySettings, String> {
    if g.checkpoint_every.is_some() && g.signing_key.is_none() {
        return Err(
            "gateway.checkpoint_every: there is no signing_key to sign checkpoints with"
                .to_string(),
        );
    }
    let store = g.store.unwrap_or_else(|| "sqlite://postern.db".to_string());
    let max_connections = count(g.max_connections, 1024, "gateway.max_connections")?;
    let retention = duration(&g.retention, "7d", "gateway.retention")?;
    let approval_ttl = positive(&g.approval_ttl, "15m", "gateway.approval_ttl")?;
    let attach_wait = duration(&g.attach_wait, "10s", "gateway.attach_wait")?;
    let max_calls_per_actor = count(g.max_calls_per_actor, 64, "gateway.max_calls_per_actor")?;
    let max_sessions_per_actor = count(
        g.max_sessions_per_actor,
        64,
        "gateway.max_sessions_per_actor",
    )?;
    let max_streams_per_actor = count(
        g.max_streams_per_actor,
        256,
        "gateway.max_streams_per_actor",
    )?;
    let max_pending_approvals_per_actor = count(
        g.max_pending_approvals_per_actor,
        100,
        "gateway.max_pending_approvals_per_actor",
    )?;
    let max_connections_per_actor = count(
        g.max_connections_per_actor,
        256,
        "gateway.max_connections_per_actor",
    )?;
    let max_connections_per_address = per_address(g.max_connections_per_address, max_connections)?;
    let trusted_proxies = trusted_proxies(g.trusted_proxies.take().unwrap_or_default())?;
    let first_byte_timeout = positive(&g.first_byte_timeout, "5s", "gateway.first_byte_timeout")?;
    let header_read_timeout =
        positive(&g.header_read_timeout, "10s", "gateway.header_read_timeout")?;
    let body_read_timeout = positive(&g.body_read_timeout, "10s", "gateway.body_read_timeout")?;
    let min_body_rate = count(g.min_body_rate, 1024, "gateway.min_body_rate")?;
    let idle_timeout = positive(&g.idle_timeout, "2m", "gateway.idle_timeout")?;
    let session_idle = positive(&g.session_idle, "1h", "gateway.session_idle")?;
    let instance_lease = instance_lease(&g.instance_lease, &store)?;
    let tls = listener_tls(g.tls)?;
    let checkpoint_every = checkpoint_every(&g.checkpoint_every)?;
    let vault = vault(g.vault)?;
    let gateway = GatewaySettings {
        listen: g.listen.unwrap_or_else(|| "127.0.0.1:8750".to_string()),
        public_url: public_url(g.public_url)?,
        store,
        fingerprint_key: g.fingerprint_key,
        signing_key: g.signing_key,
        retention,
        max_body_bytes: g.max_body_bytes.unwrap_or(1 << 20),
        allowed_origins: g.allowed_origins.unwrap_or_default(),
        approval_ttl,
        attach_wait,
        checkpoint_every,
        max_calls_per_actor,
        max_sessions_per_actor,
        max_streams_per_actor,
        max_pending_approvals_per_actor,
        max_connections_per_actor,
        max_connections,
        max_connections_per_address,
        trusted_proxies,
        first_byte_timeout,
        header_read_timeout,
        body_read_timeout,
        min_body_rate: u64::from(min_body_rate),
        idle_timeout,
        session_idle,
        instance_lease,
        tls,
        vault,
        vault_passphrase: g.vault_passphrase,
    };
    check_vault(&gateway)?;
    Ok(gateway)
}

/// A duration key, or its default.
fn duration(value: &Option<String>, default: &str, field: &str) -> Result<Duration, String> {
    parse_duration(value.as_deref().unwrap_or(default)).map_err(|e| format!("{field}: {e}"))
}

/// A bound of zero would refuse everything: refused, naming the key.
fn positive(value: &Option<String>, default: &str, field: &str) -> Result<Duration, String> {
    let d = duration(value, default, field)?;
    if d.is_zero() {
        Err(format!("{field}: must be longer than 0"))
    } else {
        Ok(d)
    }
}

/// A count key, or its default; zero is refused for the same reason as a zero duration.
fn count(value: Option<u32>, default: u32, field: &str) -> Result<u32, String> {
    match value {
        Some(0) => Err(format!("{field}: at least 1")),
        Some(n) => Ok(n),
        None => Ok(default),
    }
}

/// One address may not be allowed more connections than everyone together; by default it
/// gets a quarter of them.
fn per_address(value: Option<u32>, max_connections: u32) -> Result<u32, String> {
    match value {
        Some(n) if n > max_connections => Err(format!(
            "gateway.max_connections_per_address: {n} is more than max_connections ({max_connections})"
        )),
        n => count(
            n,
            (max_connections / 4).max(1),
            "gateway.max_connections_per_address",
        ),
    }
}

fn instance_lease(value: &Option<String>, store: &str) -> Result<Duration, String> {
    if value.is_some() && !store.starts_with("postgres") {
        return Err("gateway.instance_lease applies to a PostgreSQL store only (on SQLite a crashed process is known at once by its lock file)".into());
    }
    let d = positive(value, "30s", "gateway.instance_lease")?;
    if d < Duration::from_secs(1) {
        Err("gateway.instance_lease: at least 1s".into())
    } else {
        Ok(d)
    }
}

fn listener_tls(tls: Option<RawListenerTls>) -> Result<Option<ListenerTls>, String> {
    match tls {
        Some(t) if t.cert.is_empty() || t.key.is_empty() => {
            Err("gateway.tls: cert and key name PEM files (relative to this file)".to_string())
        }
        Some(t) => Ok(Some(ListenerTls {
            cert: t.cert,
            key: t.key,
        })),
        None => Ok(None),
    }
}

fn checkpoint_every(value: &Option<String>) -> Result<Duration, String> {
    let d = duration(value, "1m", "gateway.checkpoint_every")?;
    if d < Duration::from_secs(1) {
        Err("gateway.checkpoint_every: at least 1s".to_string())
    } else {
        Ok(d)
    }
}

fn vault(value: Option<String>) -> Result<Option<String>, String> {
    match value {
        Some(v) if v.is_empty() => Err("gateway.vault: name the vault file".to_string()),
        other => Ok(other),
    }
}

/// The gateway must start, authenticate and sign before anyone unlocks the vault: only the
/// secrets of credentials may live in it.
fn check_vault(gateway: &GatewaySettings) -> Result<(), String> {
    if gateway.vault_passphrase.is_some() && gateway.vault.is_none() {
        return Err("gateway.vault_passphrase: there is no [gateway] vault to unlock".to_string());
    }
    let outside = [
        ("gateway.fingerprint_key", Some(&gateway.fingerprint_key)),
        ("gateway.signing_key", gateway.signing_key.as_ref()),
        (
            "gateway.vault_passphrase",
            gateway.vault_passphrase.as_ref(),
        ),
    ];
    for (key, r) in outside {
        if matches!(r, Some(SecretRef::Vault(_))) {
            return Err(format!("{key}: a vault reference is only allowed for a credential's secret (the gateway needs this before the vault is unlocked)"));
        }
    }
    Ok(())
}

/// `public_url = "https://postern.example.com"`: a scheme and a host, no path to append to.
fn public_url(value: Option<String>) -> Result<Option<String>, String> {
    let Some(url) = value else { return Ok(None) };
    let url = url.trim_end_matches('/').to_string();
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(['/', '?', '#']) => Ok(Some(url)),
        _ => Err(format!("gateway.public_url: {url:?} is not a URL of scheme and host alone (\"https://postern.example.com\")")),
    }
}

/// `trusted_proxies = ["10.0.0.0/8", "127.0.0.1", …]`: networks, or addresses standing alone.
fn trusted_proxies(entries: Vec<String>) -> Result<Vec<ipnet::IpNet>, String> {
    entries
        .iter()
        .map(|e| {
            e.parse::<ipnet::IpNet>()
                .or_else(|_| e.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    format!("gateway.trusted_proxies: {e:?} is neither an address nor a network (\"10.0.0.0/8\", \"127.0.0.1\")")
                })
        })
        .collect()
}

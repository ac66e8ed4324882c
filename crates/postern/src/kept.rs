//! The tokens the CLI keeps from the identity provider (`postern login`'s, `postern connect
//! --client-id`'s): one file per place (the operator sign-in for a gateway, an agent client's
//! token for an MCP endpoint), mode 0600 in a 0700 directory under
//! `$XDG_STATE_HOME/postern/tokens`, written whole (a partial file, then a rename), and
//! refreshed with its refresh token when it nears its end. A token is never printed.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use postern_identity::{Provider, Tokens};
use serde::{Deserialize, Serialize};

/// A token is refreshed when it has less than this left.
const MARGIN: Duration = Duration::from_secs(30);

/// What is kept for one place: the operator sign-in for a gateway, or an agent client's
/// token for an MCP endpoint.
#[derive(Serialize, Deserialize)]
pub(crate) struct Kept {
    pub place: String,
    pub issuer: String,
    pub client_id: String,
    pub resource: String,
    pub tokens: Tokens,
}

/// The place of an operator's sign-in for the gateway at `base`.
pub(crate) fn operator_place(base: &str) -> String {
    format!("ops {base}")
}

/// Where the tokens of `place` are kept.
fn kept_path(place: &str) -> Result<PathBuf> {
    let state = match std::env::var_os("XDG_STATE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").context(
            "neither XDG_STATE_HOME nor HOME is set: there is nowhere to keep the token",
        )?)
        .join(".local/state"),
    };
    let digest = postern_core::digest::sha256(place.as_bytes());
    Ok(state
        .join("postern/tokens")
        .join(format!("{}.json", hex::encode(&digest[..12]))))
}

pub(crate) fn keep(kept: &Kept) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let path = kept_path(&kept.place)?;
    let dir = path.parent().context("the token file has a directory")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    // A name of its own: two bridges writing at once never write into one file.
    let partial = path.with_extension(format!("partial.{}", std::process::id()));
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("writing {}", partial.display()))?;
    file.write_all(serde_json::to_string(kept)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&partial, &path)?;
    Ok(())
}

/// Whether a sign-in is kept for `place`.
pub(crate) fn is_kept(place: &str) -> bool {
    kept_path(place).is_ok_and(|p| p.exists())
}

fn kept(place: &str) -> Option<Kept> {
    let text = std::fs::read_to_string(kept_path(place).ok()?).ok()?;
    serde_json::from_str(&text).ok()
}

/// A fresh access token from what is kept for `place` (refreshed when it nears its end);
/// `None` when nothing usable is kept. `secret`: a confidential client's, for the refresh.
pub(crate) async fn kept_token(place: &str, secret: Option<&str>) -> Option<String> {
    // One refresh at a time per place across processes: a provider that rotates refresh
    // tokens revokes the whole grant when one is used twice.
    let _held = lock(place).ok()?;
    let mut k = kept(place)?;
    if k.tokens.fresh_for(MARGIN) {
        return Some(k.tokens.access_token);
    }
    let refresh = k.tokens.refresh_token.clone()?;
    let provider = Provider::discover(&k.issuer, &k.client_id, secret)
        .await
        .ok()?;
    let tokens = provider.refresh(&refresh, &k.resource).await.ok()?;
    k.tokens = tokens;
    keep(&k).ok()?;
    Some(k.tokens.access_token)
}

/// Forgets what is kept for `place`; whether there was anything.
pub(crate) fn forget(place: &str) -> Result<bool> {
    let path = kept_path(place)?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

/// An exclusive lock on `place`'s token file (released when the file is dropped).
fn lock(place: &str) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = kept_path(place)?.with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.lock()
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

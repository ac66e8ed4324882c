//! Resolving secret references from the configuration (environment and files; the vault
//! arrives with the gateway).
//!
//! `postern serve` takes the variables its config names out of the process environment at
//! start-up, before any thread or child exists ([`take_from_environment`]): a later read of the
//! environment (a library's, a child's inherited copy) finds none of them. The process's
//! original environment block is still in its memory and `/proc/PID/environ`; that is closed by
//! the gateway being non-dumpable (`main`), not by this.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use postern_core::config::SecretRef;
use zeroize::Zeroizing;

/// The values of the config's `{ env = "NAME" }` references, taken at start-up.
static TAKEN: OnceLock<BTreeMap<String, Zeroizing<String>>> = OnceLock::new();

/// Reads every variable the config at `config_path` references and removes it from the
/// process environment, keeping the values for [`resolve`]. Call it once, in `main`, before
/// the runtime starts: `remove_var` is sound only while no other thread reads the environment.
pub fn take_from_environment(config_path: &Path) -> Result<()> {
    let config = crate::load_config(config_path)?;
    let mut taken = BTreeMap::new();
    for (_, reference) in config.secret_refs() {
        let SecretRef::Env(name) = reference else {
            continue;
        };
        // A variable that is not set or not UTF-8 is left to `resolve` to say, by name.
        if let Ok(value) = std::env::var(name) {
            std::env::remove_var(name);
            taken.insert(name.clone(), Zeroizing::new(value));
        }
    }
    if TAKEN.set(taken).is_err() {
        bail!("the environment's secrets were taken twice (a bug of postern)");
    }
    Ok(())
}

/// Reads the secret a reference points to. Relative file paths are relative to the config file.
pub fn resolve(reference: &SecretRef, config_dir: &Path) -> Result<String> {
    match reference {
        SecretRef::Env(name) => match TAKEN.get().and_then(|taken| taken.get(name)) {
            Some(value) => Ok(value.to_string()),
            None => std::env::var(name).with_context(|| {
                format!("environment variable {name} (referenced by the config) is not set")
            }),
        },
        SecretRef::File(path) => {
            let path = config_dir.join(path);
            let text = crate::keys::read_private(&path, "secret file")?;
            Ok(text.trim().to_string())
        }
        SecretRef::Vault(name) => bail!("secret vault:{name}: the vault is not available to this command yet; use {{ env = \"…\" }} or {{ file = \"…\" }}"),
    }
}

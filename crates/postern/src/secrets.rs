//! Resolving secret references from the configuration (environment and files; the vault
//! arrives with the gateway).

use std::path::Path;

use anyhow::{bail, Context, Result};
use postern_core::config::SecretRef;

/// Reads the secret a reference points to. Relative file paths are relative to the config file.
pub fn resolve(reference: &SecretRef, config_dir: &Path) -> Result<String> {
    match reference {
        SecretRef::Env(name) => std::env::var(name)
            .with_context(|| format!("environment variable {name} (referenced by the config) is not set")),
        SecretRef::File(path) => {
            let path = config_dir.join(path);
            let text = crate::keys::read_private(&path, "secret file")?;
            Ok(text.trim().to_string())
        }
        SecretRef::Vault(name) => bail!("secret vault:{name}: the vault is not available to this command yet; use {{ env = \"…\" }} or {{ file = \"…\" }}"),
    }
}

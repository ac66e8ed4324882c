//! Key material: generated from the OS's randomness, stored as hex files readable only by
//! their owner.

use std::path::Path;

use anyhow::{Context, Result};
use postern_audit::SigningKey;

pub fn random_32() -> Result<[u8; 32]> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("the OS random source failed: {e}"))?;
    Ok(b)
}

pub fn read_signing_key(path: &Path) -> Result<SigningKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading signing key {}", path.display()))?;
    Ok(SigningKey::from_hex(&text)?)
}

/// Writes a secret file with mode 0600, refusing to overwrite one that exists.
pub fn write_secret(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut f = options
        .open(path)
        .with_context(|| format!("creating {} (it must not exist yet)", path.display()))?;
    writeln!(f, "{contents}")?;
    Ok(())
}

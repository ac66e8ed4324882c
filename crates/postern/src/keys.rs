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
    let text = read_private(path, "signing key")?;
    Ok(SigningKey::from_hex(&text)?)
}

/// Reads a file that holds a secret, refusing one that others on the machine can read (as ssh
/// refuses a private key): a key anyone can read is no longer a secret, and it is better said
/// at start-up than found later.
pub fn read_private(path: &Path, what: &str) -> Result<String> {
    refuse_shared(path, what)?;
    std::fs::read_to_string(path).with_context(|| format!("reading {what} {}", path.display()))
}

/// Refuses a file that its group or others may read or write.
pub fn refuse_shared(path: &Path, what: &str) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path)
            .with_context(|| format!("reading {what} {}", path.display()))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            anyhow::bail!(
                "{what} {} is readable by others (mode {mode:03o}): run chmod 600 {}",
                path.display(),
                path.display()
            );
        }
    }
    Ok(())
}

/// The SQLite store holds every call's arguments and every target's answer: a new one is
/// created readable by its owner only, and an existing one that others may read is refused
/// (SQLite gives its `-wal` and `-shm` files the database file's mode).
pub fn private_store(path: &Path) -> Result<()> {
    if !path.exists() {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            Ok(_) => return Ok(()),
            // Another process created it meanwhile: check it as any existing store.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e).with_context(|| format!("creating the store {}", path.display()))
            }
        }
    }
    refuse_shared(path, "the store")
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

//! The gateway's vault slot (contract §6 step 1): the vault file the config names, locked or
//! unlocked in memory. An operator unlocks it (`/ops/vault/unlock`, `postern vault unlock`) or
//! the config names a passphrase source; locking drops the decrypted secrets and the key
//! (zeroized). While it is locked, a call whose credential's secret is in the vault is refused
//! before anything is sent, and a request that would leave after a lock is not sent.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use postern_channels::http::{Credential, Secret};
use postern_core::config::CredentialKind;
use postern_vault::{Unlocked, VaultError, VaultFile};

/// A credential whose secret is a vault entry, read at each request.
#[derive(Clone, Debug)]
pub struct VaultCredential {
    pub kind: CredentialKind,
    /// The entry's name (`{ vault = "NAME" }`).
    pub name: String,
}

/// The vault file and, while unlocked, its secrets.
pub struct VaultSlot {
    path: PathBuf,
    unlocked: RwLock<Option<Arc<Unlocked>>>,
}

impl VaultSlot {
    /// The vault at `path`, locked.
    pub fn locked(path: PathBuf) -> VaultSlot {
        VaultSlot {
            path,
            unlocked: RwLock::new(None),
        }
    }

    pub fn is_locked(&self) -> bool {
        self.unlocked.read().map_or(true, |u| u.is_none())
    }

    /// Reads the file anew and unlocks it with `passphrase`; a wrong one changes nothing.
    pub fn unlock(&self, passphrase: &str) -> Result<Vec<String>, VaultError> {
        let file = VaultFile::read(&self.path)?;
        let unlocked = file.unlock(passphrase)?;
        *self.unlocked.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(unlocked));
        Ok(file.names())
    }

    /// Drops the decrypted secrets and the key (zeroized once no request holds them).
    pub fn lock(&self) {
        self.unlocked
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// The names in the vault file.
    pub fn names(&self) -> Result<Vec<String>, VaultError> {
        Ok(VaultFile::read(&self.path)?.names())
    }

    /// The credential `c` with its secret from the unlocked vault, or why there is none.
    pub fn credential(&self, c: &VaultCredential) -> Result<Option<Credential>, String> {
        let guard = self.unlocked.read().unwrap_or_else(|e| e.into_inner());
        let Some(unlocked) = guard.as_ref() else {
            return Err("the vault is locked".to_string());
        };
        let secret = unlocked.get(&c.name).map_err(|e| e.to_string())?;
        Ok(Credential::from_kind(&c.kind, Secret::new(secret.expose())).ok())
    }
}

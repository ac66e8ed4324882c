//! Postern's vault: the secrets of credentials (`{ vault = "NAME" }` in the config), encrypted
//! at rest in one JSON file, and unlocked in memory by a passphrase.
//!
//! The construction is off the shelf: Argon2id (RFC 9106; 19 MiB, 2 passes, one lane, the
//! OWASP minimum) derives a 256-bit key from the passphrase and a random salt; each secret is
//! sealed with XChaCha20-Poly1305 under a fresh random 192-bit nonce, its name as associated
//! data (so entries cannot be swapped); a sealed constant proves the passphrase. Only names are
//! stored in clear (`postern vault list` shows them without the passphrase).
//!
//! Architecture invariant: a secret's plaintext exists only in a [`Plain`] (zeroized when
//! dropped) and in an [`Unlocked`] vault's memory, and the derived key only in an [`Unlocked`]
//! (zeroized on lock); neither is ever written, printed or formatted (`Debug` shows names).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use zeroize::{Zeroize, Zeroizing};

/// The file's format tag.
const FORMAT: &str = "postern-vault/1";
/// What the check entry seals: a passphrase that opens it is the vault's.
const CHECK: &[u8] = b"postern vault passphrase check";
const CHECK_NAME: &str = "\u{0}check";

/// Why the vault cannot be read or changed. Never quotes a secret or the passphrase.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("the vault file {file}: {reason}")]
    File { file: String, reason: String },
    #[error("the vault file {file} is not a Postern vault ({reason})")]
    Corrupt { file: String, reason: String },
    #[error("wrong passphrase: the vault was not unlocked")]
    WrongPassphrase,
    #[error("the passphrase is empty")]
    EmptyPassphrase,
    #[error("the vault has no secret {0:?}")]
    Missing(String),
    #[error("secret {0:?} does not decrypt: the vault file was changed outside postern")]
    Tampered(String),
    #[error("a secret name must be 1 to 128 letters, digits, '-', '_' or '.'; {0:?} is not")]
    BadName(String),
    #[error("the vault {0} exists already; remove it first to start a new one")]
    Exists(String),
}

/// A secret's plaintext, wiped from memory when dropped.
pub struct Plain(Zeroizing<String>);

impl Plain {
    pub fn new(text: String) -> Plain {
        Plain(Zeroizing::new(text))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Plain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Plain(<redacted>)")
    }
}

#[derive(Clone, Serialize, Deserialize)]
struct Sealed {
    nonce: String,
    ciphertext: String,
}

#[derive(Clone, Serialize, Deserialize)]
struct Kdf {
    algorithm: String,
    m_kib: u32,
    t: u32,
    p: u32,
    salt: String,
}

/// The vault as stored: names in clear, values sealed.
#[derive(Clone, Serialize, Deserialize)]
pub struct VaultFile {
    format: String,
    kdf: Kdf,
    check: Sealed,
    secrets: BTreeMap<String, Sealed>,
}

impl fmt::Debug for VaultFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultFile")
            .field("names", &self.secrets.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the OS random source works");
    b
}

impl VaultFile {
    /// A new, empty vault locked by `passphrase`.
    pub fn create(passphrase: &str) -> Result<(VaultFile, Unlocked), VaultError> {
        if passphrase.is_empty() {
            return Err(VaultError::EmptyPassphrase);
        }
        let params = Params::new(19 * 1024, 2, 1, Some(32)).expect("valid Argon2 parameters");
        let kdf = Kdf {
            algorithm: "argon2id".into(),
            m_kib: params.m_cost(),
            t: params.t_cost(),
            p: params.p_cost(),
            salt: hex::encode(random::<16>()),
        };
        let key = derive(&kdf, passphrase)?;
        let check = seal(&key, CHECK_NAME, CHECK);
        let file = VaultFile {
            format: FORMAT.into(),
            kdf,
            check,
            secrets: BTreeMap::new(),
        };
        let unlocked = Unlocked {
            key,
            secrets: BTreeMap::new(),
        };
        Ok((file, unlocked))
    }

    /// Reads a vault file.
    pub fn read(path: &Path) -> Result<VaultFile, VaultError> {
        let file = path.display().to_string();
        let text = std::fs::read(path).map_err(|e| VaultError::File {
            file: file.clone(),
            reason: e.to_string(),
        })?;
        let vault: VaultFile = serde_json::from_slice(&text).map_err(|e| VaultError::Corrupt {
            file: file.clone(),
            reason: e.to_string(),
        })?;
        if vault.format != FORMAT || vault.kdf.algorithm != "argon2id" {
            return Err(VaultError::Corrupt {
                file,
                reason: format!(
                    "format {:?}, key derivation {:?}",
                    vault.format, vault.kdf.algorithm
                ),
            });
        }
        Ok(vault)
    }

    /// Writes the vault to `path` atomically (a temporary file renamed over it), readable by
    /// its owner only. With `new`, refuses to replace an existing file.
    pub fn write(&self, path: &Path, new: bool) -> Result<(), VaultError> {
        let file = path.display().to_string();
        if new && path.exists() {
            return Err(VaultError::Exists(file));
        }
        let io = |e: std::io::Error| VaultError::File {
            file: file.clone(),
            reason: e.to_string(),
        };
        let text = serde_json::to_vec_pretty(self).expect("a vault serializes");
        let tmp = path.with_extension("vault-new");
        {
            use std::io::Write;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut f = options.open(&tmp).map_err(io)?;
            f.write_all(&text).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// The names of the secrets (no passphrase needed: names are not secret).
    pub fn names(&self) -> Vec<String> {
        self.secrets.keys().cloned().collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.secrets.contains_key(name)
    }

    /// Opens the vault with `passphrase`: every secret is decrypted now, so a damaged one is
    /// said at unlock, not at the call that needs it.
    pub fn unlock(&self, passphrase: &str) -> Result<Unlocked, VaultError> {
        let key = derive(&self.kdf, passphrase)?;
        open(&key, CHECK_NAME, &self.check).map_err(|_| VaultError::WrongPassphrase)?;
        let mut secrets = BTreeMap::new();
        for (name, sealed) in &self.secrets {
            let plain = open(&key, name, sealed).map_err(|_| VaultError::Tampered(name.clone()))?;
            let text = String::from_utf8(plain.to_vec())
                .map_err(|_| VaultError::Tampered(name.clone()))?;
            secrets.insert(name.clone(), Plain::new(text));
        }
        Ok(Unlocked { key, secrets })
    }

    /// Sets `name` to `value`, sealed with the unlocked vault's key.
    pub fn set(&mut self, unlocked: &Unlocked, name: &str, value: &str) -> Result<(), VaultError> {
        check_name(name)?;
        self.secrets.insert(
            name.to_string(),
            seal(&unlocked.key, name, value.as_bytes()),
        );
        Ok(())
    }

    /// Removes `name`; whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        self.secrets.remove(name).is_some()
    }
}

/// An unlocked vault: the derived key and the decrypted secrets, wiped when dropped (locking
/// is dropping it).
pub struct Unlocked {
    key: Zeroizing<[u8; 32]>,
    secrets: BTreeMap<String, Plain>,
}

impl fmt::Debug for Unlocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unlocked")
            .field("names", &self.secrets.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Unlocked {
    /// The secret `name`.
    pub fn get(&self, name: &str) -> Result<&Plain, VaultError> {
        self.secrets
            .get(name)
            .ok_or_else(|| VaultError::Missing(name.to_string()))
    }
}

fn check_name(name: &str) -> Result<(), VaultError> {
    let ok = (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(VaultError::BadName(name.chars().take(130).collect()))
    }
}

fn derive(kdf: &Kdf, passphrase: &str) -> Result<Zeroizing<[u8; 32]>, VaultError> {
    if passphrase.is_empty() {
        return Err(VaultError::EmptyPassphrase);
    }
    let corrupt = |reason: String| VaultError::Corrupt {
        file: "(in memory)".into(),
        reason,
    };
    // Bounds on what a file may ask for: a doctored one must not exhaust memory or time.
    if kdf.m_kib > 1024 * 1024 || kdf.t > 16 || kdf.p > 8 {
        return Err(corrupt(format!(
            "key derivation parameters out of bounds (m {} KiB, t {}, p {})",
            kdf.m_kib, kdf.t, kdf.p
        )));
    }
    let params = Params::new(kdf.m_kib, kdf.t, kdf.p, Some(32))
        .map_err(|e| corrupt(format!("key derivation parameters: {e}")))?;
    let salt = hex::decode(&kdf.salt).map_err(|e| corrupt(format!("salt: {e}")))?;
    let mut key = Zeroizing::new([0u8; 32]);
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_into(passphrase.as_bytes(), &salt, key.as_mut())
        .map_err(|e| corrupt(format!("key derivation: {e}")))?;
    Ok(key)
}

fn seal(key: &[u8; 32], name: &str, plain: &[u8]) -> Sealed {
    let cipher = XChaCha20Poly1305::new(key.into());
    let nonce = random::<24>();
    let ciphertext = cipher
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: plain,
                aad: name.as_bytes(),
            },
        )
        .expect("XChaCha20-Poly1305 seals any message");
    Sealed {
        nonce: hex::encode(nonce),
        ciphertext: hex::encode(ciphertext),
    }
}

fn open(key: &[u8; 32], name: &str, sealed: &Sealed) -> Result<Zeroizing<Vec<u8>>, ()> {
    let nonce = hex::decode(&sealed.nonce).map_err(|_| ())?;
    let ciphertext = hex::decode(&sealed.ciphertext).map_err(|_| ())?;
    if nonce.len() != 24 {
        return Err(());
    }
    let cipher = XChaCha20Poly1305::new(key.into());
    let mut plain = cipher
        .decrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: &ciphertext,
                aad: name.as_bytes(),
            },
        )
        .map_err(|_| ())?;
    let out = Zeroizing::new(plain.clone());
    plain.zeroize();
    Ok(out)
}

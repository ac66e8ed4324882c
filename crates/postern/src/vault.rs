//! `postern vault …`: the vault file (init, set, list, remove), and the running gateway's
//! vault (unlock, lock) through its operator API. A passphrase is read from the terminal
//! without echo, or from `--passphrase-fd N` / `--passphrase-file F` for scripts; a secret's
//! value from standard input. Neither is ever taken from the command line or printed.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use postern_vault::VaultFile;
use serde_json::json;
use zeroize::Zeroizing;

use crate::operator::GatewayArgs;

#[derive(Args, Clone)]
pub struct VaultFileArgs {
    /// The gateway configuration whose [gateway] vault names the file.
    #[arg(long, short, default_value = "postern.toml")]
    pub config: PathBuf,
    #[command(flatten)]
    pub passphrase: PassphraseArgs,
}

#[derive(Args, Clone, Default)]
pub struct PassphraseArgs {
    /// Read the passphrase from this open file descriptor (e.g. 0 for standard input).
    #[arg(long, value_name = "N", conflicts_with = "passphrase_file")]
    pub passphrase_fd: Option<u32>,
    /// Read the passphrase from this file (readable by its owner only).
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum VaultCommand {
    /// Creates the vault file the config names, locked by a new passphrase.
    Init(VaultFileArgs),
    /// Sets the secret NAME to the value read from standard input.
    Set {
        name: String,
        #[command(flatten)]
        file: VaultFileArgs,
    },
    /// The names of the secrets (no passphrase needed).
    List {
        #[arg(long, short, default_value = "postern.toml")]
        config: PathBuf,
    },
    /// Removes the secret NAME.
    Remove {
        name: String,
        #[arg(long, short, default_value = "postern.toml")]
        config: PathBuf,
    },
    /// Unlocks the running gateway's vault (an operator's token).
    Unlock {
        #[command(flatten)]
        passphrase: PassphraseArgs,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
    /// Locks the running gateway's vault: its secrets and key are dropped from memory.
    Lock(GatewayArgs),
}

pub fn run(cmd: &VaultCommand) -> Result<i32> {
    match cmd {
        VaultCommand::Init(a) => {
            let path = vault_path(&a.config)?;
            if path.exists() {
                bail!("the vault {} exists already", path.display());
            }
            let passphrase = read_passphrase(&a.passphrase, true)?;
            let (file, _) = VaultFile::create(&passphrase)?;
            file.write(&path, true)?;
            println!("created the vault {} (empty, mode 0600)", path.display());
        }
        VaultCommand::Set { name, file } => {
            let path = vault_path(&file.config)?;
            let mut vault = read_vault(&path)?;
            let passphrase = read_passphrase(&file.passphrase, false)?;
            let unlocked = vault.unlock(&passphrase)?;
            let value = read_value(name)?;
            vault.set(&unlocked, name, &value)?;
            vault.write(&path, false)?;
            println!(
                "set {name} in {} (the running gateway reads it at its next unlock)",
                path.display()
            );
        }
        VaultCommand::List { config } => {
            for name in read_vault(&vault_path(config)?)?.names() {
                println!("{name}");
            }
        }
        VaultCommand::Remove { name, config } => {
            let path = vault_path(config)?;
            let mut vault = read_vault(&path)?;
            if !vault.remove(name) {
                bail!("the vault {} holds no secret {name:?}", path.display());
            }
            vault.write(&path, false)?;
            println!("removed {name} from {}", path.display());
        }
        VaultCommand::Unlock {
            passphrase,
            gateway,
        } => {
            refuse_clear_text(&gateway.base()?)?;
            let passphrase = read_passphrase(passphrase, false)?;
            let answer = crate::operator::post(
                gateway,
                "/ops/vault/unlock",
                json!({"passphrase": passphrase.as_str()}),
            )?;
            println!(
                "unlocked: {} secret(s)",
                answer["names"].as_array().map_or(0, Vec::len)
            );
        }
        VaultCommand::Lock(gateway) => {
            crate::operator::post(gateway, "/ops/vault/lock", json!({}))?;
            println!("locked");
        }
    }
    Ok(0)
}

/// The passphrase never crosses a network in clear: `http://` only to a loopback gateway.
fn refuse_clear_text(url: &str) -> Result<()> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Ok(());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    let host = host.trim_matches(['[', ']']);
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        bail!("refusing to send the vault passphrase over plain http:// to {host}: use the gateway's https:// address ([gateway] tls)")
    }
}

/// The vault file of the config: `[gateway] vault`, relative to the config file.
fn vault_path(config: &Path) -> Result<PathBuf> {
    let parsed = crate::load_config(config)?;
    let Some(file) = parsed.gateway.vault else {
        bail!(
            "{}: [gateway] vault is not set; add vault = \"postern.vault\"",
            config.display()
        );
    };
    Ok(crate::config_dir(config).join(file))
}

fn read_vault(path: &Path) -> Result<VaultFile> {
    crate::keys::refuse_shared(path, "the vault")?;
    Ok(VaultFile::read(path)?)
}

/// The passphrase: from a file descriptor, a file, or the terminal (twice, for a new one).
fn read_passphrase(a: &PassphraseArgs, new: bool) -> Result<Zeroizing<String>> {
    let text = if let Some(fd) = a.passphrase_fd {
        let mut text = String::new();
        std::fs::File::open(format!("/proc/self/fd/{fd}"))
            .and_then(|mut f| f.read_to_string(&mut text))
            .with_context(|| format!("reading the passphrase from file descriptor {fd}"))?;
        text
    } else if let Some(file) = &a.passphrase_file {
        crate::keys::read_private(file, "the passphrase file")?
    } else {
        let first = rpassword::prompt_password("vault passphrase: ")
            .context("reading the passphrase from the terminal (or give --passphrase-fd N)")?;
        if new {
            let again = rpassword::prompt_password("again: ")?;
            if again != first {
                bail!("the two passphrases differ");
            }
        }
        first
    };
    let text = Zeroizing::new(text.trim_end_matches(['\n', '\r']).to_string());
    if text.is_empty() {
        bail!("the passphrase is empty");
    }
    Ok(text)
}

/// A secret's value from standard input (prompted without echo on a terminal).
fn read_value(name: &str) -> Result<Zeroizing<String>> {
    use std::io::IsTerminal;
    let text = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("value of {name}: "))?
    } else {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the secret from standard input")?;
        text
    };
    let text = Zeroizing::new(text.trim_end_matches(['\n', '\r']).to_string());
    if text.is_empty() {
        bail!("the value of {name} is empty (give it on standard input)");
    }
    Ok(text)
}

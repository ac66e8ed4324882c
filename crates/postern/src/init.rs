//! `postern init` and `postern keygen`: a commented starter config and fresh keys.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use postern_audit::SigningKey;

use crate::keys::{random_32, write_secret};

#[derive(Args)]
pub struct InitArgs {
    /// Directory to write postern.toml and the keys into.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

#[derive(Args)]
pub struct KeygenArgs {
    /// Where to write the Ed25519 signing key (hex, mode 0600); the public key goes to FILE.pub.
    #[arg(long, default_value = "postern.signing.key")]
    out: PathBuf,
}

const STARTER: &str = r#"# Postern configuration. Unknown keys are refused; secrets are only ever referenced
# ({ env = "NAME" }, { file = "PATH" } or { vault = "NAME" }), never written here.

[gateway]
listen = "127.0.0.1:8750"
store = "sqlite://postern.db"                       # or postgres://user@host/db for replicas
fingerprint_key = { file = "postern.fingerprint.key" }
signing_key = { file = "postern.signing.key" }      # signs audit checkpoints
# retention = "7d"                                  # default record retention per tool

[[actor]]
name = "my-agent"
token = { env = "MY_AGENT_TOKEN" }                  # the bearer token the agent presents
session_approval = "auto"                           # or "required" (once per run)

[credential.example-api]
kind = "bearer"                                     # bearer | basic (username) | header (header) | ssh_key
secret = { env = "EXAMPLE_API_TOKEN" }

[[tool]]
name = "create_invoice"
description = "Create an invoice"
class = "idempotent_write"        # read_only | idempotent_write | conditional_write | irreversible | remote_command
match_window = "10m"              # an identical call within this window is the same intent
input_schema = { type = "object", required = ["customer", "amount"], properties = { customer = { type = "string" }, amount = { type = "integer" } } }
http = { method = "POST", url = "http://127.0.0.1:9000/invoices", credential = "example-api" }
recovery = { status_query = { method = "GET", url = "http://127.0.0.1:9000/invoices?idempotency_key={execution_id}" } }
"#;

pub fn init(a: &InitArgs) -> Result<()> {
    std::fs::create_dir_all(&a.dir)?;
    let config = a.dir.join("postern.toml");
    if config.exists() {
        bail!("{} already exists; not overwriting it", config.display());
    }
    write_secret(
        &a.dir.join("postern.fingerprint.key"),
        &hex::encode(random_32()?),
    )?;
    let public = write_signing_key(&a.dir.join("postern.signing.key"))?;
    std::fs::write(&config, STARTER)?;
    println!("wrote {}", config.display());
    println!(
        "wrote {} (HMAC key for intent fingerprints; keep it secret)",
        a.dir.join("postern.fingerprint.key").display()
    );
    println!(
        "wrote {} (Ed25519 signing key for audit checkpoints; keep it secret)",
        a.dir.join("postern.signing.key").display()
    );
    println!("audit public key: {public}  (give it to whoever verifies: postern audit verify --public-key …)");
    Ok(())
}

pub fn keygen(a: &KeygenArgs) -> Result<()> {
    let public = write_signing_key(&a.out)?;
    println!("wrote {}; public key: {public}", a.out.display());
    Ok(())
}

fn write_signing_key(path: &std::path::Path) -> Result<String> {
    let key = SigningKey::from_bytes(random_32()?);
    write_secret(path, &key.to_hex())?;
    let public = key.verifying_key().to_string();
    let mut pub_path = path.as_os_str().to_owned();
    pub_path.push(".pub");
    std::fs::write(PathBuf::from(pub_path), format!("{public}\n"))?;
    Ok(public)
}

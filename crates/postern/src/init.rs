//! `postern init` and `postern keygen`: a commented starter config and fresh keys, or (with
//! `--from-mcp-json`) a config made from an MCP host's own list of servers.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;
use postern_audit::SigningKey;

use crate::keys::{random_32, write_secret};

mod mcp_json;
mod probe;

#[derive(Args)]
pub struct InitArgs {
    /// Directory to write postern.toml and the keys into.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Make the config from an MCP host's JSON (Claude Desktop's, Cursor's or the MCP
    /// Inspector's `mcpServers`, VS Code's `servers`): one upstream per server, its secrets
    /// moved out to environment variables.
    #[arg(long, value_name = "FILE")]
    from_mcp_json: Option<PathBuf>,
}

#[derive(Args)]
pub struct KeygenArgs {
    /// Where to write the Ed25519 signing key (hex, mode 0600); the public key goes to FILE.pub.
    #[arg(long, default_value = "postern.signing.key")]
    out: PathBuf,
}

/// The starter config: `examples/postern.toml` is its one source (a test parses it, and starts
/// `postern serve` on what `init` writes).
const STARTER: &str = include_str!("../../../examples/postern.toml");

pub fn init(a: &InitArgs) -> Result<()> {
    let config = a.dir.join("postern.toml");
    refuse_existing(&config)?;
    match &a.from_mcp_json {
        None => {
            write_gateway(&a.dir, STARTER)?;
            println!("next: set BILLING_AGENT_TOKEN (16+ characters) and INVOICES_API_TOKEN, point the tools at your API, then: postern serve -c {}", config.display());
        }
        Some(file) => {
            // Everything is read and checked before anything is written.
            let made = mcp_json::Onboarding::from_file(file, STARTER)?;
            let (parsed, values) = made.for_probe()?;
            let listed = probe::list_tools(&parsed, &values, &a.dir);
            let onboarding = made.with_tools(&listed)?;
            write_gateway(&a.dir, onboarding.config())?;
            onboarding.print(&config);
        }
    }
    Ok(())
}

fn refuse_existing(config: &Path) -> Result<()> {
    if config.exists() {
        bail!("{} already exists; not overwriting it", config.display());
    }
    Ok(())
}

/// Writes `dir/postern.toml` (never over an existing one) and the two keys it names beside it,
/// and says so.
fn write_gateway(dir: &Path, config_text: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let config = dir.join("postern.toml");
    refuse_existing(&config)?;
    write_secret(
        &dir.join("postern.fingerprint.key"),
        &hex::encode(random_32()?),
    )?;
    let public = write_signing_key(&dir.join("postern.signing.key"))?;
    std::fs::write(&config, config_text)?;
    println!("wrote {}", config.display());
    println!(
        "wrote {} (HMAC key for intent fingerprints; keep it secret)",
        dir.join("postern.fingerprint.key").display()
    );
    println!(
        "wrote {} (Ed25519 signing key for audit checkpoints; keep it secret)",
        dir.join("postern.signing.key").display()
    );
    println!("audit public key: {public}  (give it to whoever verifies: postern audit verify --public-key …)");
    Ok(())
}

pub fn keygen(a: &KeygenArgs) -> Result<()> {
    let public = write_signing_key(&a.out)?;
    println!("wrote {}; public key: {public}", a.out.display());
    Ok(())
}

fn write_signing_key(path: &Path) -> Result<String> {
    let key = SigningKey::from_bytes(random_32()?);
    write_secret(path, &key.to_hex())?;
    let public = key.verifying_key().to_string();
    let mut pub_path = path.as_os_str().to_owned();
    pub_path.push(".pub");
    std::fs::write(PathBuf::from(pub_path), format!("{public}\n"))?;
    Ok(public)
}

//! `postern fingerprint`: the canonical record and fingerprint of a would-be call.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use postern_core::duration::format_duration;
use postern_core::{ActionRecord, Arguments, FingerprintKey};

use crate::secrets;

#[derive(Args)]
pub struct FingerprintArgs {
    /// The gateway configuration.
    #[arg(long, short, default_value = "postern.toml")]
    config: PathBuf,
    /// The tool being called.
    #[arg(long)]
    tool: String,
    /// The calling actor (as declared in the config).
    #[arg(long)]
    actor: String,
    /// The intent scope (defaults to the actor).
    #[arg(long)]
    scope: Option<String>,
    /// The arguments as a JSON object.
    #[arg(
        long,
        conflicts_with = "args_file",
        required_unless_present = "args_file"
    )]
    args: Option<String>,
    /// Read the arguments from a file (`-` for standard input).
    #[arg(long)]
    args_file: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &FingerprintArgs) -> Result<()> {
    let config = crate::load_config(&a.config)?;
    let config_dir = crate::config_dir(&a.config);
    let key_text = secrets::resolve(&config.gateway.fingerprint_key, &config_dir)
        .context("fingerprint key")?;
    let key = FingerprintKey::from_hex(&key_text)?;

    let Some(contract) = config.tool(&a.tool) else {
        let names: Vec<_> = config.tools.iter().map(|t| t.name.as_str()).collect();
        bail!(
            "tool {:?} is not declared; declared tools: {}",
            a.tool,
            names.join(", ")
        );
    };
    if config.actor(&a.actor).is_none() {
        bail!("actor {:?} is not declared in [[actor]]", a.actor);
    }
    let raw = match (&a.args, &a.args_file) {
        (Some(s), _) => s.clone(),
        (None, Some(p)) if p.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
        (None, Some(p)) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        (None, None) => bail!("give the arguments with --args or --args-file"),
    };
    let arguments = Arguments::parse(&raw)?;
    let record = ActionRecord::build(contract, &a.actor, a.scope.as_deref(), &arguments, &key)?;
    let canonical = String::from_utf8(record.canonical_bytes()?)?;
    let fingerprint = key.fingerprint(canonical.as_bytes());

    if a.json {
        let out = serde_json::json!({
            "tool": contract.name,
            "class": contract.class,
            "match_window": format_duration(contract.match_window),
            "record": record,
            "canonical": canonical,
            "fingerprint": fingerprint,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("tool          {} ({})", contract.name, contract.class);
        if contract.class.is_read_only() {
            println!("matching      never (read_only: every call is a new execution)");
        } else {
            println!("match window  {}", format_duration(contract.match_window));
        }
        println!("actor         {}", record.actor);
        println!("intent scope  {}", record.intent_scope);
        println!("record        {canonical}");
        println!("fingerprint   {fingerprint}");
    }
    Ok(())
}

//! `postern audit export` and `postern audit verify`: the audit chain, offline.

use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use postern_audit::{
    verify_export_with, ChainRange, ExportHeader, ExportLine, Report, SigningKey, Verifier,
    VerifyingKey, EXPORT_FORMAT,
};
use postern_ledger::{Ledger, LedgerOptions, StoreReader};

use crate::keys;

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Write the whole audit chain to a self-contained JSONL file (signs a fresh checkpoint first).
    Export(ExportArgs),
    /// Verify an exported file or a store, offline: hashes, links, order, signed checkpoints,
    /// and that every execution's events form a possible lifecycle.
    Verify(VerifyArgs),
}

#[derive(Args)]
pub struct StoreArgs {
    /// The store (sqlite://PATH or postgres://…); defaults to the config's `[gateway] store`.
    #[arg(long)]
    store: Option<String>,
    /// The gateway configuration, for the store and the signing key.
    #[arg(long, short, default_value = "postern.toml")]
    config: PathBuf,
}

#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Where to write the export.
    #[arg(long)]
    out: PathBuf,
    /// The signing key file (hex); defaults to the config's `signing_key`.
    #[arg(long)]
    signing_key: Option<PathBuf>,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// An exported JSONL file.
    #[arg(long, conflicts_with = "store", required_unless_present = "store")]
    file: Option<PathBuf>,
    /// A store URL (sqlite://PATH or postgres://…), read directly.
    #[arg(long)]
    store: Option<String>,
    /// The public key checkpoints must be signed with (`ed25519:<hex>`, or a file holding it).
    #[arg(long)]
    public_key: String,
    /// With --store: exit 1 also when events follow the last signed checkpoint (nothing vouches
    /// for them: a cut of the tail would not be seen). With --file this is the default.
    #[arg(long, conflicts_with = "allow_unsigned_tail")]
    require_signed_tail: bool,
    /// With --file: accept events that no signed checkpoint or signed export head covers (a
    /// cut or rewrite after the last signature would not be seen). Prints a warning.
    #[arg(long)]
    allow_unsigned_tail: bool,
    /// A head recorded elsewhere, `CHAIN:SEQ:HASH` (as `audit export` prints it): the log must
    /// still hold that hash at that seq. Repeatable.
    #[arg(long, value_name = "CHAIN:SEQ:HASH")]
    expect_head: Vec<String>,
    /// A witness file (`[audit.witness] file`): every checkpoint in it must be signed, its head
    /// in the log, and (where the log reaches it) still among the log's checkpoints.
    #[arg(long, value_name = "FILE")]
    witness: Vec<PathBuf>,
    /// The gateway's `[gateway] checkpoint_every`: events older than it plus `--grace` must be
    /// covered by a signature (older unsigned history is a BREAK).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    checkpoint_every: std::time::Duration,
    /// How long past `--checkpoint-every` an event may stay unsigned (a gateway stopped by
    /// `kill -9` leaves its tail unsigned until it starts again on SQLite, or until the
    /// PostgreSQL instance that takes it over signs it).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    grace: std::time::Duration,
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    postern_core::duration::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))
}

/// `CHAIN:SEQ:HASH` (the chain may itself contain `:`, so it is split from the right).
fn parse_anchor(text: &str) -> Result<(String, u64, [u8; 32])> {
    let bad =
        || anyhow::anyhow!("--expect-head {text:?}: expected CHAIN:SEQ:HASH (HASH: 64 hex digits)");
    let (rest, hash) = text.rsplit_once(':').ok_or_else(bad)?;
    let (chain, seq) = rest.rsplit_once(':').ok_or_else(bad)?;
    let seq = seq.parse().map_err(|_| bad())?;
    let hash = postern_core::hexdigits::decode32(hash).ok_or_else(bad)?;
    if chain.is_empty() {
        return Err(bad());
    }
    Ok((chain.to_string(), seq, hash))
}

pub fn run(cmd: &AuditCommand) -> Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match cmd {
        AuditCommand::Export(a) => rt.block_on(export(a)).map(|()| 0),
        AuditCommand::Verify(a) => {
            let mut verifier = Verifier::new(read_public_key(&a.public_key)?);
            for anchor in &a.expect_head {
                let (chain, seq, hash) = parse_anchor(anchor)?;
                verifier.expect_head(chain, seq, hash);
            }
            for file in &a.witness {
                for c in crate::witness::read(file)? {
                    verifier.witnessed(&c);
                }
            }
            if !a.allow_unsigned_tail {
                let window = (a.checkpoint_every + a.grace).as_millis();
                verifier
                    .require_signed_within(i64::try_from(window).unwrap_or(i64::MAX), crate::now());
            }
            let report = match (&a.file, &a.store) {
                (Some(file), _) => verify_file(file, verifier)?,
                (None, Some(url)) => rt.block_on(verify_store(url, verifier))?,
                (None, None) => bail!("give --file FILE or --store URL"),
            };
            println!("{report}");
            Ok(verdict(a, &report))
        }
    }
}

/// The exit code: 1 for breaks, and for an unsigned tail where one is refused (an export by
/// default, a store with --require-signed-tail: a live store always has a tail younger than its
/// gateway's `checkpoint_every`).
fn verdict(a: &VerifyArgs, report: &Report) -> i32 {
    if report.events == 0 && report.is_valid() {
        // An empty log proves nothing (a store path resolved wrongly reads as one).
        println!("NOTHING TO VERIFY: the log holds no events");
        return 1;
    }
    let unsigned = report.unsigned_tail_events();
    let strict = if a.file.is_some() {
        !a.allow_unsigned_tail
    } else {
        a.require_signed_tail
    };
    if unsigned > 0 && strict {
        let why = if a.file.is_some() {
            "a signed tail is required; --allow-unsigned-tail accepts one"
        } else {
            "--require-signed-tail"
        };
        println!("REFUSED ({why}): {unsigned} event(s) are not covered by a signed checkpoint or signed export head");
        return 1;
    }
    if unsigned > 0 && a.allow_unsigned_tail {
        crate::messages::say(format_args!("warning: --allow-unsigned-tail: {unsigned} event(s) are covered by no signature; a cut or rewrite of them after the last signature would not be seen"));
    }
    if report.is_valid() {
        0
    } else {
        1
    }
}

fn read_public_key(text: &str) -> Result<VerifyingKey> {
    let from_file = Path::new(text)
        .is_file()
        .then(|| std::fs::read_to_string(text))
        .transpose()?;
    Ok(VerifyingKey::from_text(
        from_file.as_deref().unwrap_or(text),
    )?)
}

async fn export(a: &ExportArgs) -> Result<()> {
    let (url, key) = store_and_key(&a.store, a.signing_key.as_deref())?;
    if let Some(file) = url.strip_prefix("sqlite://") {
        let file = Path::new(file.split('?').next().unwrap_or(file));
        if !file.exists() {
            bail!(
                "there is no store at {} (export reads an existing store; it does not create one)",
                file.display()
            );
        }
    }
    let key = std::sync::Arc::new(key.context("export signs a checkpoint of the current head: give --signing-key or set signing_key in the config")?);
    let public = key.verifying_key();
    let (ledger, _) = Ledger::open(
        &url,
        LedgerOptions {
            signing_key: Some(key.clone()),
            ..LedgerOptions::default()
        },
    )
    .await?;
    let now = crate::now();
    ledger.checkpoint(now).await?;
    // The heads are read once and the file ends exactly at them (the header signs them): what
    // a running gateway appends meanwhile is left for the next export.
    let heads = ledger.read().chain_head_events().await?;
    let out = File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut out = BufWriter::new(out);
    let header = ExportHeader {
        format: EXPORT_FORMAT.to_string(),
        exported_at: now,
        ranges: heads
            .iter()
            .map(|h| ChainRange {
                chain: h.chain.clone(),
                from: 1,
                to: h.seq,
            })
            .collect(),
        public_key: Some(public.to_string()),
        heads: Some(heads.clone()),
        signature: None,
    };
    let header = ExportLine::Header(header.signed(&key)?);
    writeln!(out, "{}", serde_json::to_string(&header)?)?;
    let head_of = |chain: &str| heads.iter().find(|h| h.chain == chain).map(|h| h.seq);
    for c in ledger.read().checkpoints().await? {
        if head_of(&c.chain).is_some_and(|h| c.seq <= h) {
            writeln!(
                out,
                "{}",
                serde_json::to_string(&ExportLine::Checkpoint(c))?
            )?;
        }
    }
    for r in ledger.read().pruned_ranges().await? {
        writeln!(out, "{}", serde_json::to_string(&ExportLine::Pruned(r))?)?;
    }
    let written = write_events(&ledger, &mut out, &head_of).await?;
    out.flush()?;
    crate::messages::say(format_args!("exported {written} events to {}; verify with: postern audit verify --file {} --public-key {public}", a.out.display(), a.out.display()));
    for h in heads {
        let anchor = format!(
            "{}:{}:{}",
            h.chain,
            h.seq,
            postern_core::hexdigits::encode(h.hash)
        );
        crate::messages::say(format_args!("head {anchor} (keep it outside the store: `--expect-head {anchor}` proves later that the log up to it was not rewritten)"));
    }
    Ok(())
}

/// Writes every event up to its chain's head (`head_of`); returns how many.
async fn write_events(
    ledger: &Ledger,
    out: &mut impl Write,
    head_of: &impl Fn(&str) -> Option<u64>,
) -> Result<u64> {
    let mut written = 0u64;
    let mut failure = None;
    ledger
        .read().scan_events(|row| match row {
            Ok(e) => {
                if head_of(&e.body.chain).is_none_or(|h| e.body.seq > h) {
                    return;
                }
                if let Err(err) = serde_json::to_string(&ExportLine::Event(e)).map_err(anyhow::Error::from).and_then(|l| Ok(writeln!(out, "{l}")?)) {
                    failure.get_or_insert(err);
                }
                written += 1;
            }
            Err((pos, reason)) => {
                failure.get_or_insert(anyhow::anyhow!("event at position {pos} cannot be read: {reason}; run `postern audit verify --store` to see every break"));
            }
        })
        .await?;
    match failure {
        Some(e) => Err(e),
        None => Ok(written),
    }
}

fn store_and_key(s: &StoreArgs, key_file: Option<&Path>) -> Result<(String, Option<SigningKey>)> {
    let config = if s.config.exists() {
        Some(crate::load_config(&s.config)?)
    } else {
        None
    };
    let url = match (&s.store, &config) {
        (Some(u), _) => u.clone(),
        // As `serve` reads it: a relative SQLite path is relative to the config file.
        (None, Some(c)) => {
            crate::resolve_store_path(&c.gateway.store, &crate::config_dir(&s.config))
        }
        (None, None) => bail!(
            "give --store URL or a config ({} does not exist)",
            s.config.display()
        ),
    };
    let key = match (key_file, &config) {
        (Some(f), _) => Some(keys::read_signing_key(f)?),
        (None, Some(c)) => match &c.gateway.signing_key {
            Some(r) => Some(SigningKey::from_hex(&crate::secrets::resolve(
                r,
                &crate::config_dir(&s.config),
            )?)?),
            None => None,
        },
        (None, None) => None,
    };
    Ok((url, key))
}

/// Reports progress on a terminal only (never into a pipe or a CI log).
struct Progress {
    on: bool,
    started: Instant,
    last: Instant,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            on: std::io::stderr().is_terminal(),
            started: Instant::now(),
            last: Instant::now(),
        }
    }
    fn tick(&mut self, events: u64, total: Option<u64>) {
        if !self.on || self.last.elapsed().as_millis() < 200 {
            return;
        }
        self.last = Instant::now();
        let rate = events as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        match total {
            Some(t) if t > 0 => {
                let pct = (events as f64 / t as f64 * 100.0).min(100.0);
                let filled = (pct / 5.0) as usize;
                crate::messages::progress(format_args!(
                    "[{}{}] {pct:5.1}% {events} events, {rate:.0}/s ",
                    "#".repeat(filled),
                    " ".repeat(20 - filled.min(20))
                ));
            }
            _ => crate::messages::progress(format_args!("{events} events verified, {rate:.0}/s ")),
        }
    }
    fn done(&self) {
        if self.on {
            crate::messages::say(format_args!(""));
        }
    }
}

/// Verifies an exported file.
pub fn verify_file(path: &Path, verifier: Verifier) -> Result<Report> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut progress = Progress::new();
    let report = verify_export_with(
        BufReader::with_capacity(1 << 20, file),
        verifier,
        |events, total| progress.tick(events, total),
    )?;
    progress.done();
    Ok(report)
}

/// Verifies a store's rows directly. The store is opened read-only: verifying the evidence
/// never adds to it (no migration, no recovery scan, no instance row).
pub async fn verify_store(url: &str, verifier: Verifier) -> Result<Report> {
    let store = StoreReader::open(url).await?;
    let mut progress = Progress::new();
    let report = store
        .verify(verifier, |events, total| progress.tick(events, Some(total)))
        .await?;
    progress.done();
    Ok(report)
}

//! `postern serve`: resolve the config's secrets, open the ledger, serve MCP.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use postern_audit::SigningKey;
use postern_channels::http::{ConnectionReuse, HttpChannel};
use postern_channels::mcp::Upstream;
use postern_core::config::{Config, SecretRef};
use postern_core::FingerprintKey;
use postern_front::Tokens;
use postern_ledger::{Ledger, LedgerOptions};
use postern_pipeline::vault::VaultSlot;
use postern_pipeline::{Dialers, Gateway, Registry};
use postern_vault::VaultFile;

use crate::{resolve_store_path, secrets};

mod background;
mod listeners;
mod people;
use background::{keep_background_work, sign_head};
use listeners::{serve_metrics, serve_on_listener};
use people::{actor_tokens, console_setup, introspection_secrets, operator_tokens};

#[derive(Args)]
pub struct ServeArgs {
    /// The gateway configuration.
    #[arg(long, short, default_value = "postern.toml")]
    pub config: PathBuf,
    /// Serve MCP over stdin/stdout (for a local agent) instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
    /// With --stdio: the actor the local agent acts as (default: the only [[actor]]).
    #[arg(long)]
    pub actor: Option<String>,
    /// Override `[gateway] listen` (e.g. 127.0.0.1:0 for an ephemeral port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Log lines on stderr as text or as JSON objects (filter with POSTERN_LOG).
    #[arg(long, value_enum, default_value_t)]
    pub log_format: crate::telemetry::LogFormat,
}

/// Everything `serve` and `demo` need, built from a config file.
pub struct Assembled {
    pub gateway: Arc<Gateway>,
    /// bearer tokens → actors and operators
    pub tokens: Tokens,
    /// Stops the upstream MCP links (and their child processes).
    pub stop_upstreams: tokio_util::sync::CancellationToken,
    /// The operator console's setup (`None` without any `[[operator]]`: no one could log in).
    pub console: Option<postern_console::ConsoleSetup>,
}

/// `operator_api`: whether operators can reach this gateway (over HTTP); without it (`serve
/// --stdio`) their tokens are neither read nor required, and there is no console.
pub async fn assemble(config_path: &Path, operator_api: bool) -> Result<Assembled> {
    let config: Config = crate::load_config(config_path)?;
    let dir = crate::config_dir(config_path);
    let key = FingerprintKey::from_hex(
        &secrets::resolve(&config.gateway.fingerprint_key, &dir).context("fingerprint key")?,
    )?;
    let signing_key = match &config.gateway.signing_key {
        Some(r) => Some(Arc::new(SigningKey::from_hex(
            &secrets::resolve(r, &dir).context("signing key")?,
        )?)),
        None => None,
    };
    let tokens = actor_tokens(&config, &dir)?;
    let operators = match operator_api {
        true => operator_tokens(&config, &dir, &tokens)?,
        false => HashMap::new(),
    };
    let resource_server = postern_front::ResourceServer::new(
        &config,
        introspection_secrets(&config, &dir)?,
        tokens.keys().chain(operators.keys()),
    );
    if let Some(server) = &resource_server {
        // Each issuer's metadata and keys, fetched now; one that is down is tried again later.
        server.warm().await;
    }
    let console = match operator_api {
        true => console_setup(
            &config,
            &dir,
            (&operators, &tokens),
            signing_key.as_ref(),
            resource_server.as_ref().map(|r| r.issuers()),
        )?,
        false => None,
    };
    let tokens = Tokens {
        actors: tokens,
        operators,
        resource_server,
    };
    let resolved = crate::resolve::resolve(&config, &dir)?;
    // Upstream MCP servers are started (or dialled) now, and waited for (each up to its
    // startup_timeout) before the gateway lists tools or listens: a host that lists tools once
    // at start sees them all. One still down does not stop the gateway; its tools are listed
    // unavailable, and a call waits for it (again up to the bound) or fails, sending nothing.
    let (upstreams, stop_upstreams) = start_upstreams(&config, &resolved, &dir).await?;
    let dialers = Dialers {
        http: Arc::new(HttpChannel::with_reuse(connection_reuse()?)),
        upstreams,
        exposed_all: config
            .upstreams
            .iter()
            .filter_map(|(n, u)| Some((n.clone(), u.expose_all.clone()?)))
            .collect(),
        ssh: Arc::default(),
    };
    let registry = Registry::new(&config.tools, &resolved, &dialers)?;
    let ledger = open_ledger(&config, &dir, signing_key).await?;
    let vault = open_vault(&config, &dir)?;
    // The tools' pins of upstreams that came up are waited for within the same bound.
    let startup_bound = config
        .upstreams
        .values()
        .map(|u| u.startup_timeout)
        .max()
        .unwrap_or_default();
    let mut gateway = Gateway::new(config, registry, key, Arc::new(ledger))?;
    if let Some(vault) = vault {
        gateway = gateway.with_vault(vault);
    }
    gateway.watch_tool_pins().await?;
    // The tools of the upstreams that came up are pinned (or withheld) before anything lists.
    gateway.wait_for_pins(startup_bound).await;
    let gateway = Arc::new(gateway);
    Ok(Assembled {
        gateway,
        tokens,
        stop_upstreams,
        console,
    })
}

/// Starts (or dials) every upstream MCP server and waits for each, up to its startup_timeout.
async fn start_upstreams(
    config: &Config,
    resolved: &postern_pipeline::Resolved,
    dir: &Path,
) -> Result<(
    HashMap<String, Arc<Upstream>>,
    tokio_util::sync::CancellationToken,
)> {
    let stop_upstreams = tokio_util::sync::CancellationToken::new();
    let upstreams: std::collections::HashMap<String, Arc<Upstream>> =
        crate::resolve::upstream_specs(config, resolved, dir)?
            .into_iter()
            .map(|spec| {
                (
                    spec.name.clone(),
                    Upstream::start(spec, stop_upstreams.clone()),
                )
            })
            .collect();
    let mut waits = tokio::task::JoinSet::new();
    for upstream in upstreams.values().cloned() {
        waits.spawn(async move { (upstream.wait_up().await, upstream) });
    }
    while let Some(Ok((up, upstream))) = waits.join_next().await {
        if !up {
            let why = upstream.state().up.err().unwrap_or_default();
            tracing::warn!(upstream = upstream.name(), why = %why, "the upstream is not up after its startup_timeout; its tools are listed unavailable until it is");
        }
    }
    Ok((upstreams, stop_upstreams))
}

/// Opens the ledger (a SQLite file kept private), marking what a stopped gateway left in flight.
async fn open_ledger(
    config: &Config,
    dir: &Path,
    signing_key: Option<Arc<SigningKey>>,
) -> Result<Ledger> {
    let store = resolve_store_path(&config.gateway.store, dir);
    if let Some(file) = store.strip_prefix("sqlite://") {
        let file = file.split('?').next().unwrap_or(file);
        crate::keys::private_store(Path::new(file))?;
    }
    let (witnessed, checkpoint_sink) = match &config.audit.witness_file {
        Some(file) => {
            let file = dir.join(file);
            let held = crate::witness::read(&file)?;
            (
                crate::witness::latest_per_chain(held),
                Some(crate::witness::sink(file)?),
            )
        }
        None => (Vec::new(), None),
    };
    if config.audit.witness_file.is_some() && signing_key.is_none() {
        anyhow::bail!("[audit] witness: there is no [gateway] signing_key, so there are no checkpoints to witness");
    }
    let options = LedgerOptions {
        signing_key,
        lease: config.gateway.instance_lease,
        witnessed,
        checkpoint_sink,
        ..LedgerOptions::default()
    };
    let (ledger, recovered) = Ledger::open(&store, options)
        .await
        .with_context(|| format!("opening the ledger at {store}"))?;
    for id in &recovered.marked_unknown {
        tracing::warn!("recovery: {id} was dispatched by a stopped gateway and never answered: now outcome_unknown (a retry will recover it by its class)");
    }
    Ok(ledger)
}

/// The vault the config names: read now (a damaged file, or one without a secret the config
/// references, is a start-up error), unlocked when the config names a passphrase source, else
/// locked until an operator unlocks it.
fn open_vault(config: &Config, dir: &Path) -> Result<Option<VaultSlot>> {
    let Some(file) = &config.gateway.vault else {
        return Ok(None);
    };
    let path = dir.join(file);
    crate::keys::refuse_shared(&path, "the vault ([gateway] vault)")?;
    let names = VaultFile::read(&path)?.names();
    let mut referenced = 0;
    for (name, c) in &config.credentials {
        if let Some(SecretRef::Vault(entry)) = &c.secret {
            referenced += 1;
            if !names.contains(entry) {
                bail!(
                    "credential {name}: the vault {} holds no secret {entry:?} (postern vault set {entry})",
                    path.display()
                );
            }
        }
    }
    let slot = VaultSlot::locked(path);
    match &config.gateway.vault_passphrase {
        Some(source) => {
            let passphrase = secrets::resolve(source, dir).context("[gateway] vault_passphrase")?;
            slot.unlock(&passphrase).context("unlocking the vault")?;
        }
        None if referenced > 0 => tracing::warn!(
            "postern: the vault is locked: calls whose credential's secret is in it are refused \
             (nothing sent) until an operator unlocks it: postern vault unlock"
        ),
        None => {}
    }
    Ok(Some(slot))
}

/// The variable that turns connection reuse to targets off. For measuring what reuse saves
/// (`bench/gateway-load --https`), not a setting: reuse is what the gateway does.
pub const NO_CONNECTION_REUSE_VAR: &str = "POSTERN_MEASURE_WITHOUT_CONNECTION_REUSE";

/// The variable that runs the gateway with no metrics recorder, no log subscriber and no span
/// export. For measuring what they cost (`bench/gateway-load --telemetry`), not a setting.
pub const NO_TELEMETRY_VAR: &str = "POSTERN_MEASURE_WITHOUT_TELEMETRY";

fn measuring_without_telemetry() -> Result<bool> {
    measuring_switch(NO_TELEMETRY_VAR, "no metrics, no logs, no spans")
}

fn connection_reuse() -> Result<ConnectionReuse> {
    Ok(
        if measuring_switch(
            NO_CONNECTION_REUSE_VAR,
            "a new connection (and TLS handshake) for every request to a target",
        )? {
            ConnectionReuse::FreshEveryRequest
        } else {
            ConnectionReuse::Pooled
        },
    )
}

/// A switch for measuring what something costs: `var=1` turns it on (said on stderr), unset,
/// empty or `0` leaves it off, anything else is an error.
fn measuring_switch(var: &str, what: &str) -> Result<bool> {
    match std::env::var(var).as_deref() {
        Err(_) | Ok("" | "0") => Ok(false),
        Ok("1") => {
            tracing::warn!("postern: {var}=1: {what}");
            Ok(true)
        }
        Ok(other) => bail!("{var}={other:?}: expected 1 or 0"),
    }
}

pub fn run(a: &ServeArgs) -> Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let telemetry = crate::load_config(&a.config)?.telemetry;
        if measuring_without_telemetry()? {
            return serve(a, &telemetry).await;
        }
        let installed =
            crate::telemetry::install(a.log_format, &telemetry, &crate::config_dir(&a.config))?;
        postern_pipeline::telemetry::install_metrics().map_err(anyhow::Error::msg)?;
        let served = serve(a, &telemetry).await;
        installed.shutdown().await;
        served
    })
}

async fn serve(a: &ServeArgs, telemetry: &postern_core::config::Telemetry) -> Result<i32> {
    let assembled = assemble(&a.config, !a.stdio).await?;
    let gateway = assembled.gateway.clone();
    if let Some(addr) = &telemetry.metrics_listen {
        serve_metrics(addr, &gateway).await?;
    }
    let signs = keep_background_work(&gateway);
    if a.stdio {
        let actor = stdio_actor(a, &gateway)?;
        postern_front::serve_stdio(gateway.clone(), actor).await?;
        // The records the writer holds back (deliveries, the calls log) before exit.
        if let Err(e) = gateway.ledger().flush().await {
            tracing::error!("postern: the last ledger records could not be committed: {e}");
        }
        if signs {
            sign_head(&gateway).await;
        }
        return Ok(0);
    }
    serve_on_listener(a, assembled.tokens, assembled.console, &gateway).await?;
    // Executions finishing in the background (MCP tasks) get to record their end.
    if !gateway.drain(std::time::Duration::from_secs(30)).await {
        tracing::warn!("postern: stopped with executions still running; their tasks will read outcome_unknown after the recovery scan");
    }
    // The runs this gateway served end with it (a client that carries on resumes its run).
    gateway.runs().end_open().await;
    assembled.stop_upstreams.cancel();
    // Records the writer holds back (deliveries, stream state) are committed before exit.
    if let Err(e) = gateway.ledger().flush().await {
        tracing::error!("postern: the last ledger records could not be committed: {e}");
    }
    if signs {
        sign_head(&gateway).await;
    }
    Ok(0)
}
/// The one actor a `--stdio` gateway serves.
fn stdio_actor(a: &ServeArgs, gateway: &Gateway) -> Result<String> {
    let actor = match &a.actor {
        Some(name) => name.clone(),
        None => match gateway.config().actors.as_slice() {
            [only] => only.name.clone(),
            _ => {
                bail!("--stdio needs --actor NAME when the config declares several actors")
            }
        },
    };
    match gateway.config().actor(&actor) {
        None => bail!("actor {actor:?} is not declared in the config"),
        Some(a) if a.session_approval == postern_core::config::SessionApproval::Required => bail!(
            "actor {actor:?} has session_approval = \"required\", but over --stdio there is no \
             operator API to authorize its run: serve it over HTTP, or set session_approval = \"auto\""
        ),
        Some(_) => {}
    }
    Ok(actor)
}

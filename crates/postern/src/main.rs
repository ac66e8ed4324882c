//! `postern`: the command-line front of the Postern MCP action gateway.
//!
//! Architecture invariant: this crate only parses arguments, reads files and environment, and
//! prints. Decisions live in the library crates; this is the only crate that uses `anyhow`.

mod activity;
mod audit;
mod budgets;
mod client;
mod connect;
mod demo;
mod fingerprint;
mod init;
mod kept;
mod keys;
mod login;
mod messages;
mod operator;
mod resolve;
mod sandbox;
mod secrets;
mod serve;
mod status;
mod telemetry;
mod terminal;
mod trace;
mod upstream;
mod vault;
mod witness;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use postern_core::config::Config;
use postern_core::Timestamp;

#[derive(Parser)]
#[command(
    name = "postern",
    version,
    about = "An MCP action gateway: every action gets an identity, a fingerprint and a durable record"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// See the product work: a real gateway, a real target and a flaky agent, step by step.
    Demo,
    /// Write a commented starter postern.toml, a fingerprint key and an audit signing key.
    ///
    /// With --from-mcp-json FILE, the config puts Postern in front of the MCP servers of a host's
    /// own config (mcpServers or servers JSON), and the change that routes the host through it is
    /// printed.
    Init(init::InitArgs),
    /// Generate an Ed25519 audit signing key (and print its public key).
    Keygen(init::KeygenArgs),
    /// Print the canonical action record and intent fingerprint a call would get.
    ///
    /// Answers "would these two calls be treated as the same intent?" without running anything.
    Fingerprint(fingerprint::FingerprintArgs),
    /// Serve MCP (Streamable HTTP at /mcp, or --stdio) in front of the configured tools.
    Serve(serve::ServeArgs),
    /// Serve MCP on stdin/stdout for a local agent, bridged to a remote gateway at URL.
    ///
    /// The bearer token comes from the environment ($POSTERN_TOKEN, or --token-env NAME). A call
    /// whose answer is lost in transit is re-issued and matched by the gateway to the same
    /// execution; if no answer comes within --recovery-time, the agent is told plainly that the
    /// outcome is not known and that repeating the identical call is safe.
    Connect(connect::ConnectArgs),
    /// The Activity log: what was asked, what was sent, what the ledger recorded.
    #[command(subcommand)]
    Activity(activity::ActivityCommand),
    /// The hash-chained audit log: export it, verify it offline.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Per-use approvals on a running gateway (an operator's token): list, show, approve, deny.
    #[command(subcommand)]
    Approvals(operator::ApprovalsCommand),
    /// The vault of credential secrets: init, set, list, remove (the file); unlock, lock (the
    /// running gateway).
    #[command(subcommand)]
    Vault(vault::VaultCommand),
    /// Runs (the Sessions log) on a running gateway: list, authorize, revoke.
    #[command(subcommand)]
    Sessions(operator::SessionsCommand),
    /// Sign in as an operator with the gateway's identity provider (device authorization
    /// grant): the operator commands then use that sign-in, refreshed, instead of a token.
    Login(login::LoginArgs),
    /// Forget the sign-in `postern login` kept for a gateway.
    Logout(operator::GatewayArgs),
    /// Executions under review on a running gateway: list, resolve as applied or not applied.
    #[command(subcommand)]
    Review(operator::ReviewCommand),
    /// A running gateway at a glance: store, upstreams, vault, pending approvals and reviews,
    /// unknown outcomes, the last signed checkpoint (an operator's token).
    Status(status::StatusArgs),
    /// Budgets on effects on a running gateway: each [[budget]] and its use now, per scope (an
    /// operator's token).
    Budgets(budgets::BudgetsArgs),
    /// Upstream MCP servers on a running gateway: list their links and tools; accept a tool
    /// version an upstream changed (tool pinning).
    #[command(subcommand)]
    Upstream(upstream::UpstreamCommand),
    /// The demo's upstream MCP server (an invoice tool that journals every call), on stdio or
    /// Streamable HTTP: what `postern demo` and the tests put behind the gateway.
    #[command(hide = true)]
    DemoUpstream(DemoUpstreamArgs),
    /// Print the CLI reference (docs/cli.md) as Markdown, generated from these definitions.
    #[command(hide = true)]
    CliReference,
}

/// docs/cli.md: every command, argument and default, from the clap definitions themselves
/// (a test compares the file with this, so the reference cannot drift from the binary).
fn cli_reference() -> String {
    let options = clap_markdown::MarkdownOptions::new()
        .title("Postern CLI reference".to_string())
        .show_footer(false)
        .show_table_of_contents(true);
    let generated = clap_markdown::help_markdown_custom::<Cli>(&options);
    format!("<!-- Generated by `postern cli-reference > docs/cli.md`; a test keeps it current. -->\n\n{generated}")
}

#[derive(clap::Args)]
struct DemoUpstreamArgs {
    /// The journal file every applied call is appended to (none: calls are only counted).
    #[arg(long)]
    journal: Option<std::path::PathBuf>,
    /// Serve Streamable HTTP on this address (prints the URL) instead of stdio.
    #[arg(long)]
    http: Option<String>,
}

fn demo_upstream(a: &DemoUpstreamArgs) -> anyhow::Result<i32> {
    use postern_demo::upstream::{serve_http, serve_stdio, Journal};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let journal = match &a.journal {
            Some(path) => Journal::new(path),
            None => Journal::none(),
        };
        match &a.http {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr).await?;
                println!("http://{}/mcp", listener.local_addr()?);
                serve_http(listener, journal).await?;
            }
            None => serve_stdio(journal).await.map_err(anyhow::Error::msg)?,
        }
        Ok(0)
    })
}

/// glibc's allocator took ~12 % of all CPU samples at c=64 on one PostgreSQL replica, most of
/// them the gateway's (docs/performance.md, issue 37's third session).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // First, while this is the only thread: no other process of this uid (an upstream, say) may
    // read this one's memory, environment or descriptors through /proc, nor attach to it.
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        messages::error(
            &anyhow::Error::new(std::io::Error::from(e)).context("making the process non-dumpable"),
        );
        return ExitCode::from(2);
    }
    let mut raw = std::env::args_os();
    if raw.nth(1).is_some_and(|verb| verb == sandbox::SUBCOMMAND) {
        return sandbox::exec(raw.collect());
    }
    let cli = Cli::parse();
    // The config's `{ env = … }` secrets leave the environment before any thread or child
    // exists (the runtime and the upstreams start later).
    if let Command::Serve(a) = &cli.command {
        if let Err(e) = secrets::take_from_environment(&a.config) {
            messages::error(&e);
            return ExitCode::from(2);
        }
    }
    // reqwest (`connect`'s and the demo's client) takes rustls' process-wide provider.
    postern_channels::http::install_default_provider();
    let result = match cli.command {
        Command::Demo => demo::run(),
        Command::Init(a) => init::init(&a).map(|()| 0),
        Command::Keygen(a) => init::keygen(&a).map(|()| 0),
        Command::Fingerprint(a) => fingerprint::run(&a).map(|()| 0),
        Command::Serve(a) => serve::run(&a),
        Command::Connect(a) => connect::run(&a),
        Command::Activity(cmd) => activity::run(&cmd),
        Command::Audit(cmd) => audit::run(&cmd),
        Command::Approvals(cmd) => operator::approvals(&cmd),
        Command::Review(cmd) => operator::review(&cmd),
        Command::Sessions(cmd) => operator::sessions(&cmd),
        Command::Login(a) => login::login(&a),
        Command::Logout(a) => login::logout(&a),
        Command::Vault(cmd) => vault::run(&cmd),
        Command::DemoUpstream(a) => demo_upstream(&a),
        Command::Upstream(cmd) => upstream::run(&cmd),
        Command::Status(a) => status::run(&a),
        Command::Budgets(a) => budgets::run(&a),
        Command::CliReference => {
            print!("{}", cli_reference());
            Ok(0)
        }
    };
    match result {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            messages::error(&e);
            ExitCode::from(2)
        }
    }
}

pub(crate) fn load_config(path: &Path) -> Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Config::parse(&text, &path.display().to_string())?)
}

pub(crate) fn config_dir(path: &Path) -> PathBuf {
    path.parent().map(PathBuf::from).unwrap_or_default()
}

/// A relative SQLite path is relative to the config file.
pub(crate) fn resolve_store_path(store: &str, dir: &Path) -> String {
    match store.strip_prefix("sqlite://") {
        Some(path) if !path.starts_with('/') && !dir.as_os_str().is_empty() => {
            format!("sqlite://{}", dir.join(path).display())
        }
        _ => store.to_string(),
    }
}

pub(crate) fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    )
}

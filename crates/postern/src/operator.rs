//! The operators' verbs, `postern approvals …` and `postern review …`: clients of the running
//! gateway's operator API (`/ops`, docs/operators.md), so a decision is recorded by
//! the gateway that holds the waiting call and wakes it at once. The operator's token comes from
//! the environment (`$POSTERN_OPERATOR_TOKEN`, or `--token-env NAME`), never from the command
//! line, or else from the identity provider's sign-in `postern login` kept.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::client::{is_variable_name, shown_variable};
use crate::terminal::{shown, text};

mod approvals;
mod sessions;

pub use approvals::approvals;
pub use sessions::sessions;

#[derive(Args, Clone)]
pub struct GatewayArgs {
    /// The gateway's address (its /ops API is on the MCP listener); default: the config's
    /// listener with -c, else http://127.0.0.1:8750.
    #[arg(long, value_name = "URL", env = "POSTERN_GATEWAY")]
    pub gateway: Option<String>,
    /// The gateway's config: its [gateway] listen (and tls) give the address.
    #[arg(long, short, value_name = "FILE", conflicts_with = "gateway")]
    pub config: Option<PathBuf>,
    /// With an https:// gateway: the PEM file of the CA that signed its certificate, trusted
    /// instead of the built-in roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// The environment variable that holds the operator's bearer token.
    #[arg(long, value_name = "NAME", default_value = "POSTERN_OPERATOR_TOKEN")]
    pub token_env: String,
    /// Print the gateway's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum ApprovalsCommand {
    /// Calls awaiting an approval, newest first.
    List(GatewayArgs),
    /// One execution's approval request (what would be sent, by whom, until when) or decision.
    Show {
        execution: String,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
    /// Approves the call: the gateway sends it. The approval is bound to the fingerprint shown
    /// by `show`, so arguments other than the ones shown can never be approved.
    Approve {
        execution: String,
        /// Why (recorded in the audit chain).
        #[arg(long)]
        reason: Option<String>,
        /// Approve the fingerprint `show` printed (`hmac-sha256:…`) instead of asking; without a
        /// terminal and without this, the call shown now is approved.
        #[arg(long, value_name = "FINGERPRINT")]
        fingerprint: Option<String>,
        /// On a terminal: approve without asking for confirmation.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
    /// Denies the call: final for that execution (an identical retry gets the denial).
    Deny {
        execution: String,
        /// Why (recorded in the audit chain, and told to the agent).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
}

#[derive(Subcommand)]
pub enum SessionsCommand {
    /// The Sessions log: runs, newest first, with their authorization and how they ended.
    List(GatewayArgs),
    /// One run: its client, protocol, transport, start and end, authorization, and every call
    /// it made with the execution each reached and how (new, attached, recovered, refused).
    Show {
        run: String,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
    /// Authorizes a run once (for actors with session_approval = "required"): its waiting
    /// calls are sent, its later calls go straight on.
    Authorize {
        run: String,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
    /// Revokes a run: its waiting calls are denied and its next calls refused.
    Revoke {
        run: String,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
}

#[derive(Subcommand)]
pub enum ReviewCommand {
    /// Executions under review (an unknown outcome nothing can settle), newest first.
    List(GatewayArgs),
    /// Records what a human found: the action was applied, or it was not.
    Resolve {
        execution: String,
        /// The action happened (an identical retry is told so; nothing is sent again).
        #[arg(
            long,
            conflicts_with = "not_applied",
            required_unless_present = "not_applied"
        )]
        applied: bool,
        /// The action did not happen (the agent may act anew with a new idempotencyKey).
        #[arg(long)]
        not_applied: bool,
        /// What was checked, and where (required; recorded in the audit chain).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
}

/// One client of the operator API.
pub(crate) struct Ops {
    http: reqwest::Client,
    base: String,
    /// The static token from the environment; `None`: the sign-in `postern login` kept.
    token: Option<String>,
    json: bool,
}

/// Where the gateway of `config` answers on this machine: its listener, an unspecified
/// address (every interface) reached on the loopback one.
fn listener_url(config: &postern_core::config::Config) -> String {
    let listen = &config.gateway.listen;
    let (host, port) = listen.rsplit_once(':').unwrap_or((listen, "8750"));
    let host = match host {
        "0.0.0.0" | "" => "127.0.0.1",
        "[::]" => "[::1]",
        other => other,
    };
    let scheme = match config.gateway.tls.is_some() {
        true => "https",
        false => "http",
    };
    format!("{scheme}://{host}:{port}")
}

impl GatewayArgs {
    /// The gateway's base URL: --gateway, else the listener of -c's config, else the default.
    pub(crate) fn base(&self) -> Result<String> {
        let base = match (&self.gateway, &self.config) {
            (Some(url), _) => url.clone(),
            (None, Some(config)) => listener_url(&crate::load_config(config)?),
            (None, None) => "http://127.0.0.1:8750".to_string(),
        };
        Ok(base
            .trim_end_matches('/')
            .trim_end_matches("/mcp")
            .to_string())
    }
}

impl Ops {
    pub(crate) fn new(a: &GatewayArgs) -> Result<Ops> {
        let var = shown_variable(&a.token_env);
        if !is_variable_name(&a.token_env) {
            bail!("--token-env takes the NAME of an environment variable, not the token itself; the value given is not shown");
        }
        let base = a.base()?;
        let token = match std::env::var(&a.token_env) {
            Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
            _ if crate::kept::is_kept(&crate::kept::operator_place(&base)) => None,
            _ => bail!("no operator token: set the environment variable {var} to an [[operator]]'s token (or name another with --token-env), or sign in with `postern login`"),
        };
        if !base.starts_with("http://") && !base.starts_with("https://") {
            bail!("--gateway {base:?}: expected http(s)://host:port");
        }
        let http = crate::client::http_builder(&base, a.ca_file.as_deref())?
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .context("building the HTTP client")?;
        Ok(Ops {
            http,
            base,
            token,
            json: a.json,
        })
    }

    pub(crate) async fn get(&self, path: &str) -> Result<Value> {
        let req = self.http.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        self.send(req).await
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value> {
        let token = match &self.token {
            Some(token) => token.clone(),
            None => crate::kept::kept_token(&crate::kept::operator_place(&self.base), None)
                .await
                .context("the sign-in `postern login` kept has expired and cannot be refreshed: run `postern login` again")?,
        };
        let resp = req
            .header("authorization", format!("Bearer {token}"))
            .send()
            .await
            .with_context(|| format!("reaching the gateway at {}", self.base))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !status.is_success() {
            let why = value["error"]
                .as_str()
                .map_or(value.to_string(), str::to_string);
            bail!("the gateway refused (HTTP {}): {why}", status.as_u16());
        }
        Ok(value)
    }

    pub(crate) fn print(&self, value: &Value, text: impl FnOnce(&Value)) {
        if self.json {
            println!("{value:#}");
        } else {
            text(value);
        }
    }
}

/// One `POST` to the operator API, on a runtime of its own (for `postern vault`).
pub fn post(a: &GatewayArgs, path: &str, body: Value) -> Result<Value> {
    runtime()?.block_on(async { Ops::new(a)?.post(path, body).await })
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub fn review(cmd: &ReviewCommand) -> Result<i32> {
    runtime()?.block_on(async {
        match cmd {
            ReviewCommand::List(a) => {
                let ops = Ops::new(a)?;
                let v = ops.get("/ops/reviews").await?;
                ops.print(&v, |v| {
                    print_list(&v["reviews"], "no execution is under review");
                    print_more(v, "/ops/reviews");
                });
            }
            ReviewCommand::Resolve {
                execution,
                applied,
                not_applied: _,
                reason,
                gateway,
            } => {
                let ops = Ops::new(gateway)?;
                let resolution = if *applied { "applied" } else { "not_applied" };
                let v = ops
                    .post(
                        &format!("/ops/reviews/{}/resolve", segment(execution)),
                        json!({"resolution": resolution, "reason": reason}),
                    )
                    .await?;
                ops.print(&v, |v| {
                    println!(
                        "resolved: {} is {} ({resolution})",
                        execution,
                        text(&v["state"])
                    )
                });
            }
        }
        Ok(0)
    })
}

/// A path segment with everything but unreserved characters (and `:`) percent-encoded, so a run
/// or execution id is one segment whatever it holds.
pub(crate) fn segment(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        // `.` too: a segment of dots would be normalised away.
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~' | b':') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn print_list(items: &Value, none: &str) {
    let items = items.as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        println!("{none}");
    }
    for line in list_lines(items) {
        println!("{line}");
    }
}

/// How many older entries a page left out, and where they are.
fn print_more(v: &Value, path: &str) {
    if let Some(more) = v["more"].as_u64().filter(|&n| n > 0) {
        println!(
            "{more} more not shown (oldest shown last): GET {path}?before={}",
            text(&v["next_before"])
        );
    }
}

/// The approvals' or reviews' table, under a header row, aligned to its longest cells (none
/// cut: an operator decides on what they see).
fn list_lines(items: &[Value]) -> Vec<String> {
    let cells: Vec<Vec<String>> = items
        .iter()
        .map(|p| {
            let expires = p["expires_at"].as_str().map(|e| shown(e).into_owned());
            vec![
                text(&p["execution_id"]).into_owned(),
                text(&p["tool"]).into_owned(),
                text(&p["actor"]).into_owned(),
                text(&p["since"]).into_owned(),
                expires.unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = ["EXECUTION", "TOOL", "ACTOR", "SINCE", "EXPIRES"];
    crate::terminal::table(&header, &cells, &[])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::list_lines;

    #[test]
    fn a_list_of_reviews_has_a_header_row_and_aligned_columns() {
        let items = [
            json!({"execution_id": "exe_1", "tool": "everything_trigger-long-running-operation",
                   "actor": "agent", "since": "2026-12-06T09:00:00Z"}),
            json!({"execution_id": "exe_2", "tool": "memory_create_entities", "actor": "agent",
                   "since": "2026-12-06T09:01:00Z", "expires_at": "2026-12-06T10:01:00Z"}),
        ];
        let lines = list_lines(&items);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("EXECUTION  TOOL "), "{lines:?}");
        let column = |l: &str, word: &str| l.find(word).unwrap();
        assert_eq!(column(&lines[0], "ACTOR"), column(&lines[1], "agent"));
        assert_eq!(column(&lines[0], "ACTOR"), column(&lines[2], "agent"));
        assert!(lines[2].ends_with("2026-12-06T10:01:00Z"), "{lines:?}");
    }
}

//! The TOML text of the config: its header (where it came from, every variable it needs), each
//! server's `[credential.*]` and `[upstream.*]` tables, the one actor and the one operator, and
//! the `[gateway]` section taken from the starter config.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Result};
use postern_core::config::{DEFAULT_MAX_DURATION, DEFAULT_UPSTREAM_TIMEOUT};
use postern_core::duration::format_duration;

use crate::init::mcp_json::servers::{Header, Server, Transport};
use crate::init::mcp_json::variables::{masked, shown, Export, Shown, Vars};
use crate::init::mcp_json::{
    classify, one_line, quote, sandbox, AGENT, AGENT_TOKEN_VAR, OPERATOR, OPERATOR_TOKEN_VAR,
};

/// Programs that may download the server before it starts: given a longer `startup_timeout`.
const FETCHERS: [&str; 6] = ["npx", "uvx", "bunx", "pnpx", "pnpm", "docker"];

/// The parts of one server's tables that depend on its transport.
#[derive(Default)]
struct Parts {
    /// `[credential.NAME]`, before the upstream.
    credential: String,
    /// `command`/`url` lines of the upstream.
    transport: String,
    /// `[upstream.NAME.env]`, after it.
    env: String,
    /// `[upstream.NAME.sandbox]` (or how to write one), last.
    sandbox: String,
}

/// One server's tables: its credential (an HTTP server with a header), then the upstream.
pub(super) fn upstream_toml(
    server: &Server,
    (name, prefix): (&str, &str),
    tools: Option<&Result<Vec<classify::Listed>, String>>,
    vars: &mut Vars,
    exports: &mut Vec<Export>,
) -> String {
    let source = &server.source;
    let mut export = |key: &str, origin: String, value: &str, whole: bool| {
        let var = vars.take(name, key);
        exports.push(Export {
            var: var.clone(),
            origin: format!("{origin} of server {source:?}"),
            shown: match whole {
                true => shown(key, value),
                false => Shown::Masked(masked(value)),
            },
            value: value.to_string(),
        });
        var
    };
    let Parts {
        credential,
        transport,
        env,
        sandbox,
    } = match &server.transport {
        Transport::Stdio { command, env, cwd } => stdio_parts(name, command, env, cwd, &mut export),
        Transport::Http { url, header } => http_parts(name, url, header.as_ref(), &mut export),
    };
    format!(
        r#"{credential}# Server {source:?} of the host's config: its tools are served as {prefix}<tool>.
[upstream.{name}]
{transport}expose = "all"
prefix = {prefix_q}
# Every tool under one contract, irreversible (a call whose answer was lost is never sent again
# on its own), except those read_only names: served as reads (performed on every call, nothing
# stored). {reads_why}
# Remove a tool that writes; `postern upstream list` shows each tool's class and why. A tool
# can also get a contract of its own:
#   [[tool]]
#   name = "{prefix}<tool>"
#   class = "read_only"
#   mcp = {{ server = "{name}", tool = "<tool>" }}
{read_only}default_class = "irreversible"
# A call waits this long for its answer or its next progress report (each report starts the
# wait anew), and runs at most max_duration in all; past either it is cancelled upstream and
# its outcome is unknown. Raise them for tools that work longer in silence.
timeout = "{timeout}"
max_duration = "{max_duration}"
{env}{sandbox}"#,
        timeout = format_duration(DEFAULT_UPSTREAM_TIMEOUT),
        max_duration = format_duration(DEFAULT_MAX_DURATION),
        prefix_q = quote(prefix),
        reads_why = classify::why_read_only(tools),
        read_only = classify::read_only_key(tools),
    )
}

/// `export(key, origin, value)` names the variable that will hold `value`.
/// `whole`: the value may be shown when it does not look secret (an `env` value; a header is
/// always a secret).
type ExportFn<'a> = dyn FnMut(&str, String, &str, bool) -> String + 'a;

fn stdio_parts(
    name: &str,
    command: &[String],
    env: &[(String, String)],
    cwd: &Option<String>,
    export: &mut ExportFn<'_>,
) -> Parts {
    let mut p = Parts::default();
    let _ = writeln!(p.transport, "command = {}", array(command));
    if let Some(cwd) = cwd {
        let _ = writeln!(p.transport, "cwd = {}", quote(cwd));
    }
    let program = Path::new(&command[0])
        .file_stem()
        .and_then(|p| p.to_str())
        .unwrap_or_default();
    if FETCHERS.contains(&program) {
        let _ = writeln!(
            p.transport,
            "startup_timeout = \"2m\"   # {program} may download the server before it starts"
        );
    }
    if !env.is_empty() {
        let _ = writeln!(p.env, "# Its environment: each value is read from the gateway's own at start-up.\n[upstream.{name}.env]");
    }
    for (key, value) in env {
        let var = export(key, format!("env {}", one_line(key)), value, true);
        let _ = writeln!(p.env, "{} = {{ env = {} }}", toml_key(key), quote(&var));
    }
    p.sandbox = sandbox::sandbox_toml(name, command, env, cwd.as_deref());
    p
}

fn http_parts(name: &str, url: &str, header: Option<&Header>, export: &mut ExportFn<'_>) -> Parts {
    let mut p = Parts::default();
    let _ = writeln!(p.transport, "url = {}", quote(url));
    let Some(header) = header else {
        return p;
    };
    let (kind, var) = match header {
        Header::Bearer(token) => (
            "kind = \"bearer\"".to_string(),
            export(
                "TOKEN",
                "the bearer token (Authorization header)".into(),
                token,
                false,
            ),
        ),
        Header::Named { name: h, value } => (
            format!("kind = \"header\"\nheader = {}", quote(h)),
            export(h, format!("header {}", one_line(h)), value, false),
        ),
    };
    let _ = writeln!(p.credential, "# What Postern sends to upstream {name:?} (the agent never sees it).\n[credential.{name}]\n{kind}\nsecret = {{ env = {} }}\n", quote(&var));
    let _ = writeln!(p.transport, "credential = {}", quote(name));
    p
}

/// The one actor, allowed every tool of every upstream, and the one operator.
pub(super) fn people_toml(prefixes: &[String]) -> String {
    let tools: Vec<String> = prefixes.iter().map(|p| format!("{p}*")).collect();
    format!(
        r#"# Who may call: the host (through postern connect, or postern serve --stdio), with its own
# bearer token.
[[actor]]
name = "{AGENT}"
token = {{ env = "{AGENT_TOKEN_VAR}" }}
tools = {}   # every tool of the upstreams below

# Who decides (reviews, approvals, upstream tool changes) and looks (postern status, upstream
# list, sessions list, the console at /ui), with a token of its own. Those commands read it from
# {OPERATOR_TOKEN_VAR}; postern serve --stdio serves no operator API and does not need it.
[[operator]]
name = "{OPERATOR}"
token = {{ env = "{OPERATOR_TOKEN_VAR}" }}
"#,
        array(&tools)
    )
}

/// The file's header: where it came from and every variable it needs.
pub(super) fn header(file: &str, servers: usize, exports: &[Export]) -> String {
    let width = exports
        .iter()
        .map(|e| e.var.len())
        .chain([AGENT_TOKEN_VAR.len(), OPERATOR_TOKEN_VAR.len()])
        .max()
        .unwrap_or(0);
    let mut h = format!(
        "# Postern configuration made by `postern init --from-mcp-json` from {file} ({servers} MCP\n\
         # server(s), each an [upstream.*] below).\n#\n\
         # Before `postern serve -c postern.toml`, set these environment variables:\n\
         #   {AGENT_TOKEN_VAR:<width$}  the bearer token the host presents; at least 16 characters,\n\
         #   {:<width$}  e.g. export {AGENT_TOKEN_VAR}=$(openssl rand -hex 24)\n\
         #   {OPERATOR_TOKEN_VAR:<width$}  the operator's token (postern status, review …), 16+\n",
        ""
    );
    for e in exports {
        let _ = writeln!(h, "#   {:<width$}  {}", e.var, e.origin);
    }
    h.push_str(
        "# `postern init` wrote the two keys named below beside this file (mode 0600) and printed the\n\
         # audit public key. Paths are relative to this file.\n#\n\
         # Unknown keys are refused with file, line and key. Secrets are only ever referenced,\n\
         # { env = \"NAME\" } or { file = \"PATH\" }, never written here.\n",
    );
    h
}

/// The starter's `[gateway]` section, its comments included: one source for both configs.
pub(super) fn gateway_section(starter: &str) -> Result<&str> {
    let start = starter.find("[gateway]\n");
    let end = starter.find("\n# Who may call");
    match (start, end) {
        (Some(s), Some(e)) if s < e => Ok(&starter[s..=e]),
        _ => bail!("the starter config has no [gateway] section to reuse (a bug of postern init)"),
    }
}

/// A TOML key: bare when it can be.
fn toml_key(k: &str) -> String {
    match !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    {
        true => k.to_string(),
        false => quote(k),
    }
}

fn array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| quote(i)).collect();
    format!("[{}]", items.join(", "))
}

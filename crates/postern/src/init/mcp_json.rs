//! `postern init --from-mcp-json FILE`: a gateway config made from the MCP servers a host
//! already runs (Claude Desktop's, Cursor's and the MCP Inspector's `mcpServers`, VS Code's
//! `servers`), and the one change to the host's config that routes it through Postern.
//!
//! Each server becomes an `[upstream.NAME]` with `expose = "all"` under the safe default
//! contract, `irreversible`: a call whose answer was lost is never sent again on its own. The
//! tools a server listed when init asked it (`probe`) that only read, by its annotations or
//! their names (`classify`), are named in its `read_only`, each with why, for the operator to
//! review; at serve time annotations decide nothing. No value of the file lands in the config
//! that may be a secret: every `env` value becomes `{ env = "POSTERN_UP_<NAME>_<KEY>" }`, an
//! HTTP server's header a `[credential.NAME]` read from the environment, and the variables are
//! printed, a value that looks secret masked. The config has one actor (the host) and one
//! operator, each with a token read from the environment.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use postern_core::config::{Config, DEFAULT_MAX_DURATION, DEFAULT_UPSTREAM_TIMEOUT};
use postern_core::duration::format_duration;
use serde_json::{Map, Value};

/// The one actor: the host, through `postern connect` (or `serve --stdio`).
const AGENT: &str = "agent";
/// Where the gateway reads the agent's token from.
const AGENT_TOKEN_VAR: &str = "POSTERN_AGENT_TOKEN";
/// The one operator, and where the gateway (and the operator's commands: `postern status`,
/// `review` …, whose default this is) read its token from.
const OPERATOR: &str = "operator";
const OPERATOR_TOKEN_VAR: &str = "POSTERN_OPERATOR_TOKEN";
/// The longest upstream name made here: its prefix leaves its tools' names room (a served name
/// is at most 64 characters).
const MAX_NAME: usize = 40;
/// Programs that may download the server before it starts: given a longer `startup_timeout`.
const FETCHERS: [&str; 6] = ["npx", "uvx", "bunx", "pnpx", "pnpm", "docker"];
/// The keys of a server entry that are carried over (`transport` is read as `type`).
const STDIO_KEYS: [&str; 6] = ["type", "transport", "command", "args", "env", "cwd"];
const HTTP_KEYS: [&str; 4] = ["type", "transport", "url", "headers"];

/// One server of the file, as written there.
struct Server {
    /// Its name in the file.
    source: String,
    transport: Transport,
}

enum Transport {
    Stdio {
        command: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
    },
    Http {
        url: String,
        header: Option<Header>,
    },
}

/// The one header an HTTP server's requests carry.
enum Header {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// Any other header, its value the secret.
    Named { name: String, value: String },
}

/// An environment variable `postern serve` needs: its name, where its value is in the file, and
/// what is printed of the value (all of it when it does not look secret, else a hint that does
/// not give it away).
struct Export {
    var: String,
    origin: String,
    shown: Shown,
    /// The value itself, for `init`'s own start of the server (never printed or written).
    value: String,
}

/// What is printed of a variable's value.
enum Shown {
    Whole(String),
    Masked(String),
}

/// The tools each upstream listed when `init` asked it, by upstream name, or why it did not
/// answer; an upstream not in it was not asked.
pub type ListedTools = BTreeMap<String, Result<Vec<classify::Listed>, String>>;

/// An upstream made from a server, for the summary.
struct Made {
    name: String,
    source: String,
    prefix: String,
    transport: &'static str,
    /// How its reads were chosen, for the summary.
    reads: String,
}

/// What `init --from-mcp-json` writes and prints.
pub struct Onboarding {
    /// The host's file and the starter config it was made with, to make it again with the
    /// servers' tools (`with_tools`).
    source: (String, String),
    config: String,
    /// The file, for messages.
    file: String,
    /// `mcpServers` or `servers`: the host's key, used again in the snippets printed.
    key: &'static str,
    /// The generated config's listen address.
    listen: String,
    made: Vec<Made>,
    exports: Vec<Export>,
    notes: Vec<String>,
}

impl Onboarding {
    /// Reads `file` and makes the config, with the `[gateway]` section of `starter`. Nothing is
    /// written: an error leaves no trace.
    pub fn from_file(file: &Path, starter: &str) -> Result<Onboarding> {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        Onboarding::from_text(&text, &one_line(&file.display().to_string()), starter)
    }

    fn from_text(text: &str, file: &str, starter: &str) -> Result<Onboarding> {
        Onboarding::make(text, file, starter, &ListedTools::new())
    }

    /// The same config, each upstream's reads named from the tools it listed (`listed`).
    pub fn with_tools(&self, listed: &ListedTools) -> Result<Onboarding> {
        Onboarding::make(&self.source.0, &self.file, &self.source.1, listed)
    }

    /// The parsed config (to start its upstreams) and the values of the variables it names.
    pub fn for_probe(&self) -> Result<(Config, BTreeMap<String, String>)> {
        let config = Config::parse(&self.config, "postern.toml")?;
        let values = self
            .exports
            .iter()
            .map(|e| (e.var.clone(), e.value.clone()))
            .collect();
        Ok((config, values))
    }

    fn make(text: &str, file: &str, starter: &str, listed: &ListedTools) -> Result<Onboarding> {
        let (key, servers, mut notes) = parse_document(text, file)?;
        let names = upstream_names(&servers, &mut notes);
        let prefixes = prefixes(&names, &mut notes)?;
        let mut vars = Vars::default();
        let mut exports = Vec::new();
        let mut body = String::new();
        let mut made = Vec::new();
        for ((server, name), prefix) in servers.iter().zip(&names).zip(&prefixes) {
            body.push('\n');
            let tools = listed.get(name.as_str());
            body.push_str(&upstream_toml(
                server,
                (name, prefix),
                tools,
                &mut vars,
                &mut exports,
            ));
            made.push(Made {
                name: name.clone(),
                source: server.source.clone(),
                prefix: prefix.clone(),
                transport: match server.transport {
                    Transport::Stdio { .. } => "stdio",
                    Transport::Http { .. } => "http",
                },
                reads: classify::summary(tools),
            });
            if let Transport::Http { url, .. } = &server.transport {
                if url.contains('?') {
                    notes.push(format!("server {:?}: its url's query is written to postern.toml as it is; if it holds a key, move the key into a header", server.source));
                }
                if url.trim_end_matches('/').ends_with("/sse") {
                    notes.push(format!("server {:?}: its url ends in /sse, the path of the SSE transport, which Postern does not speak; if the upstream does not come up, use the server's Streamable HTTP endpoint", server.source));
                }
            }
        }
        let config = format!(
            "{}\n{}{}{body}",
            header(file, servers.len(), &exports),
            gateway_section(starter)?,
            people_toml(&prefixes),
        );
        let parsed = Config::parse(&config, "postern.toml").map_err(|e| {
            anyhow!("the config made from {file} does not parse (a bug of postern init): {e}")
        })?;
        Ok(Onboarding {
            source: (text.to_string(), starter.to_string()),
            config,
            file: file.to_string(),
            key,
            listen: parsed.gateway.listen,
            made,
            exports,
            notes,
        })
    }

    /// The text of `postern.toml`.
    pub fn config(&self) -> &str {
        &self.config
    }
}

/// The host's key and its servers, in the file's order (notes for what is not carried over).
fn parse_document(text: &str, file: &str) -> Result<(&'static str, Vec<Server>, Vec<String>)> {
    // A byte-order mark, as some Windows editors write, is not JSON.
    let text = text.trim_start_matches('\u{feff}');
    let doc: Value =
        serde_json::from_str(text).map_err(|e| anyhow!("{file} is not valid JSON: {e}"))?;
    let Some(top) = doc.as_object() else {
        bail!("{file}: the top level is not a JSON object; expected {{\"mcpServers\": {{\"NAME\": {{…}}}}}}");
    };
    let (key, servers) = match (top.get("mcpServers"), top.get("servers")) {
        (Some(_), Some(_)) => bail!("{file} has both \"mcpServers\" and \"servers\": keep the one your host reads"),
        (Some(v), None) => ("mcpServers", v),
        (None, Some(v)) => ("servers", v),
        (None, None) => bail!("{file} has no \"mcpServers\" object (Claude Desktop, Cursor, the MCP Inspector) and no \"servers\" object (VS Code)"),
    };
    let Some(servers) = servers.as_object() else {
        bail!("{file}: \"{key}\" is not an object of servers by name");
    };
    if servers.is_empty() {
        bail!("{file}: \"{key}\" names no server");
    }
    let mut notes = Vec::new();
    let servers = servers
        .iter()
        .map(|(name, entry)| {
            parse_server(name, entry, &mut notes)
                .map_err(|m| anyhow!("{file}: server {name:?}: {m}"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((key, servers, notes))
}

fn parse_server(name: &str, entry: &Value, notes: &mut Vec<String>) -> Result<Server, String> {
    let entry = entry.as_object().ok_or("is not a JSON object")?;
    let kind = match entry.get("type").or_else(|| entry.get("transport")) {
        None => None,
        Some(Value::String(t)) => Some(t.as_str()),
        Some(_) => return Err("\"type\" is not a string".into()),
    };
    if kind.is_some_and(|k| k.eq_ignore_ascii_case("sse")) {
        return Err("SSE transport is not supported; use the server's Streamable HTTP endpoint (often the same host, at /mcp)".into());
    }
    let http_kind = |k: Option<&str>| {
        k.is_none_or(|k| matches!(k, "http" | "streamable-http" | "streamableHttp"))
    };
    let (transport, carried) = match (entry.get("command"), entry.get("url"), kind) {
        (Some(_), Some(_), _) => {
            return Err(
                "has both \"command\" (a stdio server) and \"url\" (an HTTP server): keep one"
                    .into(),
            )
        }
        (None, None, _) => {
            return Err(
                "has neither \"command\" (a stdio server) nor \"url\" (a Streamable HTTP server)"
                    .into(),
            )
        }
        (Some(command), None, None | Some("stdio")) => (stdio(entry, command)?, &STDIO_KEYS[..]),
        (None, Some(url), k) if http_kind(k) => (http(entry, url)?, &HTTP_KEYS[..]),
        (_, _, k) => {
            let k = k.unwrap_or_default();
            let has = if entry.contains_key("command") {
                "a \"command\""
            } else {
                "a \"url\""
            };
            return Err(format!("\"type\": {k:?} does not go with {has} (\"stdio\" with a command; \"http\" or \"streamable-http\" with a url)"));
        }
    };
    for key in entry.keys().filter(|k| !carried.contains(&k.as_str())) {
        notes.push(format!("server {name:?}: {key:?} is not carried over"));
    }
    Ok(Server {
        source: name.to_string(),
        transport,
    })
}

fn stdio(entry: &Map<String, Value>, command: &Value) -> Result<Transport, String> {
    let program = command
        .as_str()
        .filter(|c| !c.is_empty())
        .ok_or("\"command\" is not a non-empty string")?;
    let mut argv = vec![program.to_string()];
    match entry.get("args") {
        None => {}
        Some(Value::Array(args)) => {
            for arg in args {
                argv.push(
                    arg.as_str()
                        .ok_or("\"args\" holds a value that is not a string")?
                        .to_string(),
                );
            }
        }
        Some(_) => return Err("\"args\" is not an array of strings".into()),
    }
    let env = strings(entry.get("env"), "env")?;
    if let Some((var, _)) = env
        .iter()
        .find(|(var, _)| var.is_empty() || var.contains(['=', '\0']))
    {
        return Err(format!(
            "env {var:?} is not a variable name (non-empty, without '=' or NUL)"
        ));
    }
    let cwd = match entry.get("cwd") {
        None => None,
        Some(Value::String(cwd)) => Some(cwd.clone()),
        Some(_) => return Err("\"cwd\" is not a string".into()),
    };
    Ok(Transport::Stdio {
        command: argv,
        env,
        cwd,
    })
}

fn http(entry: &Map<String, Value>, url: &Value) -> Result<Transport, String> {
    let url = url.as_str().ok_or("\"url\" is not a string")?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("\"url\" must start with http:// or https://".into());
    }
    let authority = url.split("://").nth(1).unwrap_or_default();
    if authority
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default()
        .contains('@')
    {
        return Err("\"url\" holds a user name and password, which would be written to postern.toml; give the secret in an Authorization header instead".into());
    }
    let headers = strings(entry.get("headers"), "headers")?;
    let header = match headers.as_slice() {
        [] => None,
        [(name, value)] => Some(match value.split_once(' ') {
            Some((scheme, token))
                if name.eq_ignore_ascii_case("authorization")
                    && scheme.eq_ignore_ascii_case("bearer")
                    && !token.trim().is_empty() =>
            {
                Header::Bearer(token.trim().to_string())
            }
            _ => Header::Named {
                name: name.clone(),
                value: value.clone(),
            },
        }),
        more => {
            let names: Vec<&str> = more.iter().map(|(n, _)| n.as_str()).collect();
            return Err(format!("sends {} headers ({}); Postern puts one credential on an upstream's requests: keep only the header that authenticates (Authorization: Bearer …, or one API-key header)", more.len(), names.join(", ")));
        }
    };
    Ok(Transport::Http {
        url: url.to_string(),
        header,
    })
}

/// An object of strings (`env`, `headers`), in the file's order.
fn strings(value: Option<&Value>, what: &str) -> Result<Vec<(String, String)>, String> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(format!("{what}.{k} is not a string")),
            })
            .collect(),
        Some(_) => Err(format!("\"{what}\" is not an object of strings")),
    }
}

/// An upstream name per server: its own when valid (1-MAX_NAME letters, digits, '_' or '-'),
/// else one made from it, unique, with a note.
fn upstream_names(servers: &[Server], notes: &mut Vec<String>) -> Vec<String> {
    let valid = |n: &str| {
        (1..=MAX_NAME).contains(&n.len())
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    };
    let mut used: BTreeSet<String> = servers
        .iter()
        .map(|s| s.source.clone())
        .filter(|n| valid(n))
        .collect();
    let mut names = Vec::new();
    for s in servers {
        if valid(&s.source) {
            names.push(s.source.clone());
            continue;
        }
        let mut base: String = s
            .source
            .chars()
            .take(MAX_NAME)
            .map(
                |c| match c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
                    true => c,
                    false => '_',
                },
            )
            .collect();
        if base.is_empty() {
            base = "server".into();
        }
        let mut name = base.clone();
        for n in 2.. {
            if !used.contains(&name) {
                break;
            }
            name = format!("{base}_{n}");
        }
        used.insert(name.clone());
        notes.push(format!("server {:?} is upstream {name:?} (an upstream's name is 1-{MAX_NAME} letters, digits, '_' or '-' here, so that its tools' names fit in 64)", s.source));
        names.push(name);
    }
    names
}

/// Each upstream's tool-name prefix: `NAME_`, unless that would begin another's prefix or
/// another's would begin it (two tools could get one name, which the gateway refuses); then
/// `NAME2_`, `NAME3_`… Longer names choose first, so a choice always exists.
fn prefixes(names: &[String], notes: &mut Vec<String>) -> Result<Vec<String>> {
    let overlap = |a: &str, b: &str| a.starts_with(b) || b.starts_with(a);
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(names[i].len()));
    let mut chosen: Vec<Option<String>> = vec![None; names.len()];
    for i in order {
        let name = &names[i];
        let taken: Vec<String> = chosen.iter().flatten().cloned().collect();
        let prefix = std::iter::once(format!("{name}_"))
            .chain((2..1000).map(|k| format!("{name}{k}_")))
            .find(|p| !taken.iter().any(|t| overlap(p, t)))
            .ok_or_else(|| {
                anyhow!("no tool prefix for upstream {name:?} (a bug of postern init)")
            })?;
        if prefix != format!("{name}_") {
            notes.push(format!("upstream {name:?} serves its tools as {prefix}<tool>: {name}_ would overlap another upstream's prefix"));
        }
        chosen[i] = Some(prefix);
    }
    Ok(chosen.into_iter().flatten().collect())
}

/// Names of environment variables, each given once.
#[derive(Default)]
struct Vars(BTreeSet<String>);

impl Vars {
    /// `POSTERN_UP_<UPSTREAM>_<KEY>`, uppercase, anything but letters and digits '_' (with
    /// `_2`, `_3`… when two would be the same).
    fn take(&mut self, upstream: &str, key: &str) -> String {
        let part = |s: &str| -> String {
            s.chars()
                .map(|c| match c.is_ascii_alphanumeric() {
                    true => c.to_ascii_uppercase(),
                    false => '_',
                })
                .collect()
        };
        let base = format!("POSTERN_UP_{}_{}", part(upstream), part(key));
        let mut var = base.clone();
        for n in 2.. {
            if var != AGENT_TOKEN_VAR && var != OPERATOR_TOKEN_VAR && self.0.insert(var.clone()) {
                break;
            }
            var = format!("{base}_{n}");
        }
        var
    }
}

/// Words in a variable's name that say its value is a secret.
const SECRET_WORDS: [&str; 9] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASS",
    "AUTH",
    "CREDENTIAL",
    "PRIVATE",
    "COOKIE",
    "SESSION",
];

/// What is printed of `key`'s value: a path or a number whole, unless the key's name sounds
/// secret (the operator needs them as they are, and they give nothing away); else its start.
fn shown(key: &str, value: &str) -> Shown {
    let upper = key.to_ascii_uppercase();
    let secret_key = SECRET_WORDS.iter().any(|w| upper.contains(w));
    let path = ["/", "~/", "./", "../"]
        .iter()
        .any(|p| value.starts_with(p))
        && !value.contains(['?', '@', '='])
        && !value.chars().any(|c| c.is_control());
    let number = !value.is_empty() && value.len() <= 8 && value.bytes().all(|b| b.is_ascii_digit());
    match !secret_key && (path || number) {
        true => Shown::Whole(value.to_string()),
        false => Shown::Masked(masked(value)),
    }
}

/// The start of a value, enough to recognise it and not enough to use it: its first two
/// characters when it is long and they are plain, else nothing.
fn masked(value: &str) -> String {
    let start: String = value.chars().take(2).collect();
    let plain = start
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-_.:".contains(c));
    match value.chars().count() >= 8 && plain {
        true => format!("{start}…"),
        false => "…".into(),
    }
}

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
fn upstream_toml(
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
fn people_toml(prefixes: &[String]) -> String {
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
fn header(file: &str, servers: usize, exports: &[Export]) -> String {
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
fn gateway_section(starter: &str) -> Result<&str> {
    let start = starter.find("[gateway]\n");
    let end = starter.find("\n# Who may call");
    match (start, end) {
        (Some(s), Some(e)) if s < e => Ok(&starter[s..=e]),
        _ => bail!("the starter config has no [gateway] section to reuse (a bug of postern init)"),
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
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

/// Text for one line of a comment or a message.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

pub mod classify;
mod print;
mod sandbox;
#[cfg(test)]
mod tests;

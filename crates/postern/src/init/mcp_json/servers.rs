//! The host's file as written: its key (`mcpServers` or `servers`) and each server, a stdio
//! command (with its environment and directory) or a Streamable HTTP url (with its one header);
//! what cannot be carried over is refused with why, or noted.

use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};

/// The keys of a server entry that are carried over (`transport` is read as `type`).
const STDIO_KEYS: [&str; 6] = ["type", "transport", "command", "args", "env", "cwd"];
const HTTP_KEYS: [&str; 4] = ["type", "transport", "url", "headers"];

/// One server of the file, as written there.
pub(super) struct Server {
    /// Its name in the file.
    pub(super) source: String,
    pub(super) transport: Transport,
}

pub(super) enum Transport {
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
pub(super) enum Header {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// Any other header, its value the secret.
    Named { name: String, value: String },
}

/// The host's key and its servers, in the file's order (notes for what is not carried over).
pub(super) fn parse_document(
    text: &str,
    file: &str,
) -> Result<(&'static str, Vec<Server>, Vec<String>)> {
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

//! The remote gateway's address and token, from the command line and the environment (or the
//! identity provider, with `--client-id`). No
//! message here ever repeats a value that may be a token: URLs are shown masked, and a
//! `--token-env` value that does not look like a variable name is not shown at all.

use anyhow::{bail, Context, Result};

use super::ConnectArgs;
use crate::client::{is_variable_name, shown_variable};

pub(super) struct Remote {
    pub url: String,
    /// The static token, or the last one the provider gave.
    token: std::sync::Mutex<String>,
    /// How to get a token from the identity provider (`--client-id`).
    login: Option<crate::login::AgentLogin>,
    /// The HTTP client every session uses: for an `https://` URL it trusts the webpki roots, or
    /// instead the CAs of `--ca-file`, and always verifies the gateway's host name.
    pub http: reqwest::Client,
}

impl Remote {
    /// The bearer token for the next session: from the provider (kept, refreshed, or got anew)
    /// with `--client-id`, else the environment's.
    pub async fn bearer(&self) -> String {
        if let Some(login) = &self.login {
            match login.token(&self.http, &self.url).await {
                Ok(token) => *self.token.lock().unwrap_or_else(|e| e.into_inner()) = token,
                Err(e) => crate::messages::say(format_args!(
                    "postern connect: no token from the identity provider: {e:#}"
                )),
            }
        }
        self.token.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The agent's OAuth client (`--client-id`), its secret from the environment.
fn agent_login(a: &ConnectArgs, client_id: &str) -> Result<crate::login::AgentLogin> {
    let secret = match &a.client_secret_env {
        None => None,
        Some(name) if !is_variable_name(name) => bail!(
            "--client-secret-env takes the NAME of an environment variable, not the secret itself; the value given is not shown"
        ),
        Some(name) => match std::env::var(name) {
            Ok(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
            _ => bail!(
                "the environment variable {} (--client-secret-env) is not set or empty",
                shown_variable(name)
            ),
        },
    };
    Ok(crate::login::AgentLogin {
        client_id: client_id.to_string(),
        secret,
        scopes: a.scopes.clone(),
    })
}

/// Checks the arguments and the environment: the endpoint URL and the token.
pub(super) fn remote_from(a: &ConnectArgs) -> Result<Remote> {
    let var = shown_variable(&a.token_env);
    if !a.extra.is_empty() {
        bail!(
            "unexpected argument(s) after the URL (not shown: one may be a token). The token goes \
             in the environment variable {var}, never on the command line"
        );
    }
    if a.token.is_some() {
        bail!(
            "refusing a token on the command line: every user of this machine can read it from the \
             process list. Put it in the environment variable {var} (or name another with --token-env)"
        );
    }
    if !is_variable_name(&a.token_env) {
        bail!(
            "--token-env takes the NAME of an environment variable (letters, digits and _), not \
             the token itself; the value given is not a variable name and is not shown"
        );
    }
    let url = endpoint(&a.url)?;
    // Pooling is off as in rmcp's own client (a pooled connection whose last SSE body was not
    // read to its end stalls the next request).
    let http = crate::client::http_builder(&url, a.ca_file.as_deref())?
        .pool_max_idle_per_host(0)
        .build()
        .context("building the HTTP client")?;
    if let Some(client_id) = &a.client_id {
        return Ok(Remote {
            login: Some(agent_login(a, client_id)?),
            url,
            token: std::sync::Mutex::default(),
            http,
        });
    }
    let token = match std::env::var(&a.token_env) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        Ok(_) => bail!("the environment variable {var} is empty: put the bearer token for {url} in it"),
        Err(std::env::VarError::NotPresent) => bail!(
            "no token: the environment variable {var} is not set. Put the bearer token for {url} in it \
             (or name another variable with --token-env)"
        ),
        Err(std::env::VarError::NotUnicode(_)) => {
            bail!("the environment variable {var} is not valid UTF-8")
        }
    };
    Ok(Remote {
        url,
        token: std::sync::Mutex::new(token),
        login: None,
        http,
    })
}

/// `text` with anything that can carry a secret masked: userinfo, query values, the fragment.
pub(super) fn masked(text: &str) -> String {
    let text = text.trim();
    let Some((scheme, rest)) = text.split_once("://") else {
        // Not a URL at all (perhaps the token itself, given in its place): nothing is shown.
        return "(the value given, not shown: it is not an http(s):// URL)".to_string();
    };
    let scheme = format!("{scheme}://");
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_string(),
    };
    let (tail, fragment) = match tail.split_once('#') {
        Some((tail, _)) => (tail, "#***"),
        None => (tail, ""),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) => format!("{k}=***"),
                    None => "***".to_string(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}{host}{tail}{fragment}")
}

/// The MCP endpoint URL, checked: `http://host[:port]/path` (`/mcp` when no path is given). A
/// URL that could carry a token (userinfo, a query, a fragment) is refused.
fn endpoint(text: &str) -> Result<String> {
    let shown = masked(text);
    let mut url = reqwest::Url::parse(text.trim()).map_err(|e| {
        anyhow::anyhow!("invalid URL {shown}: {e}; expected the gateway's MCP endpoint, e.g. http://127.0.0.1:8710/mcp")
    })?;
    let https = match url.scheme() {
        "http" => false,
        "https" => true,
        other => bail!(
            "{shown}: unsupported scheme {other:?}; expected https://host:port/mcp (or http:// on loopback)"
        ),
    };
    let Some(host) = url.host_str().map(str::to_string) else {
        bail!("{shown}: the URL names no host; expected http://host:port/mcp");
    };
    if !url.username().is_empty() || url.password().is_some() {
        bail!("{shown}: refusing credentials in the URL (they stay visible in the process list); put the token in the environment instead");
    }
    if url.query().is_some() || url.fragment().is_some() {
        bail!("{shown}: refusing a query or fragment in the URL (a token there stays visible in the process list); the MCP endpoint takes none, and the token goes in the environment");
    }
    if url.path() == "/" || url.path().is_empty() {
        url.set_path("/mcp");
    }
    let loopback = host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback && !https {
        crate::messages::say(format_args!(
            "postern connect: warning: {host} is not a loopback address and http is not \
             encrypted: the bearer token and every call cross the network in clear text"
        ));
    }
    Ok(url.to_string())
}

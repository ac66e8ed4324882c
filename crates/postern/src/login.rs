//! Tokens from the organisation's identity provider for the commands that are clients of a
//! gateway: `postern login` (an operator, by the device authorization grant, for `/ops`) and
//! `postern connect --client-id` (an agent: client credentials with `--client-secret-env`,
//! else authorization code with PKCE on a loopback redirect, RFC 8252).
//!
//! The provider is found from the gateway itself: its protected resource metadata (RFC 9728)
//! names the resource and the authorization server. Tokens are kept by [`crate::kept`]. A token
//! is never printed or logged; what is shown is the verification address and the user code.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use postern_identity::{Provider, Tokens};
use serde_json::Value;

use crate::kept::{forget, keep, kept_token, operator_place, Kept};
use crate::operator::GatewayArgs;

#[derive(Args)]
pub struct LoginArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The client ID registered at the identity provider for Postern's CLI (a public client
    /// allowed the device authorization grant).
    #[arg(long, value_name = "ID", env = "POSTERN_CLIENT_ID")]
    pub client_id: String,
    /// A scope to ask for (repeatable), e.g. the one your provider puts groups under.
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
}

/// The protected resource metadata of `resource_path` (`mcp` or `ops`) at `base`: the resource
/// URL and the first authorization server.
pub(crate) async fn find_provider(
    http: &reqwest::Client,
    base: &str,
    resource_path: &str,
) -> Result<(String, String)> {
    let url = format!("{base}/.well-known/oauth-protected-resource/{resource_path}");
    let response = http
        .get(&url)
        .send()
        .await
        .with_context(|| format!("reaching {url}"))?;
    if !response.status().is_success() {
        bail!(
            "{url} answered {}: the gateway has no [[issuer]] (it takes static tokens only)",
            response.status()
        );
    }
    let body = response.bytes().await.context("reading its metadata")?;
    let metadata: Value = serde_json::from_slice(&body).context("its metadata is not JSON")?;
    let resource = metadata["resource"]
        .as_str()
        .context("the metadata names no resource")?;
    // RFC 9728 §3.3: the metadata is for the URL it was asked about, or it is not believed (a
    // look-alike gateway naming the real one's resource would be handed tokens for it).
    let asked = format!("{base}/{resource_path}");
    if resource != asked {
        bail!("{url} names the resource {resource:?}, not {asked:?}: refusing it (a token got for it would be sent here, to another server). Use the gateway's own address (its public_url)");
    }
    let issuer = metadata["authorization_servers"][0]
        .as_str()
        .context("the metadata names no authorization server")?;
    Ok((resource.to_string(), issuer.to_string()))
}

/// `postern login`: an operator's token for the gateway's `/ops`, by the device grant.
pub fn login(a: &LoginArgs) -> Result<i32> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let base = a.gateway.base()?;
        let http = crate::client::http_builder(&base, a.gateway.ca_file.as_deref())?
            .timeout(Duration::from_secs(30))
            .build()?;
        let (resource, issuer) = find_provider(&http, &base, "ops").await?;
        let provider = Provider::discover(&issuer, &a.client_id, None)
            .await
            .with_context(|| format!("the identity provider {issuer}"))?;
        let tokens = provider
            .device(&a.scopes, &resource, |uri, code, complete| {
                crate::messages::say(format_args!(
                    "To sign in, open {uri} and enter the code {code}"
                ));
                if let Some(complete) = complete {
                    crate::messages::say(format_args!("(or open {complete})"));
                }
            })
            .await
            .context("signing in with the identity provider")?;
        keep(&Kept {
            place: operator_place(&base),
            issuer,
            client_id: a.client_id.clone(),
            resource: resource.clone(),
            tokens,
        })?;
        crate::messages::say(format_args!(
            "Signed in: the operator commands use this sign-in for {base} (postern logout ends it)"
        ));
        Ok(0)
    })
}

/// `postern logout`: forgets the kept sign-in.
pub fn logout(a: &GatewayArgs) -> Result<i32> {
    let base = a.base()?;
    match forget(&operator_place(&base))? {
        true => crate::messages::say(format_args!("Signed out of {base}.")),
        false => crate::messages::say(format_args!("Not signed in to {base}.")),
    }
    Ok(0)
}

/// How `postern connect` gets its token from the provider.
pub(crate) struct AgentLogin {
    pub client_id: String,
    /// Client credentials: the secret (from the environment).
    pub secret: Option<String>,
    pub scopes: Vec<String>,
}

impl AgentLogin {
    /// A fresh access token for the MCP endpoint `url`: kept, refreshed, or obtained anew.
    pub(crate) async fn token(&self, http: &reqwest::Client, url: &str) -> Result<String> {
        let place = format!("mcp {url} {}", self.client_id);
        if let Some(token) = kept_token(&place, self.secret.as_deref()).await {
            return Ok(token);
        }
        let base = url.trim_end_matches('/').trim_end_matches("/mcp");
        let (resource, issuer) = find_provider(http, base, "mcp").await?;
        let provider = Provider::discover(&issuer, &self.client_id, self.secret.as_deref())
            .await
            .with_context(|| format!("the identity provider {issuer}"))?;
        let tokens = match &self.secret {
            Some(_) => provider
                .client_credentials(&self.scopes, &resource)
                .await
                .context("client credentials")?,
            None => loopback_code(&provider, &self.scopes, &resource).await?,
        };
        let access = tokens.access_token.clone();
        keep(&Kept {
            place,
            issuer,
            client_id: self.client_id.clone(),
            resource,
            tokens,
        })?;
        Ok(access)
    }
}

/// Authorization code with PKCE for a person at this machine: the browser is sent to the
/// provider, which redirects to a listener on 127.0.0.1 (RFC 8252 §7.3).
async fn loopback_code(provider: &Provider, scopes: &[String], resource: &str) -> Result<Tokens> {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let redirect = format!(
        "http://127.0.0.1:{}/callback",
        listener.local_addr()?.port()
    );
    let (url, pending) = provider.authorize(&redirect, scopes, Some(resource))?;
    crate::messages::say(format_args!(
        "postern connect: sign in to the gateway's identity provider: open {url}"
    ));
    let wait = async {
        loop {
            let (mut stream, _) = listener.accept().await?;
            // A local connection that sends nothing cannot hold the listener up.
            let Ok(Ok(query)) =
                tokio::time::timeout(Duration::from_secs(5), callback_query(&mut stream)).await
            else {
                continue;
            };
            let fields: Vec<(String, String)> =
                serde_urlencoded::from_str(&query).unwrap_or_default();
            let field = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            // Only an answer carrying this request's state is this sign-in's: anything else
            // (another local process, a page probing ports) changes nothing, error or not.
            let ours = field("state").is_some_and(|s| {
                use subtle::ConstantTimeEq;
                bool::from(s.as_bytes().ct_eq(pending.state.as_bytes()))
            });
            let text = match (ours, field("code"), field("error")) {
                (true, Some(_), _) => "Signed in: you can close this tab and return to your agent.",
                (true, None, Some(_)) => {
                    "The identity provider refused the sign-in: nothing was signed in."
                }
                _ => "This is not postern connect's sign-in: nothing was signed in.",
            };
            let page = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
            let _ = stream.write_all(page.as_bytes()).await;
            match (ours, field("code"), field("error")) {
                (true, Some(code), _) => return anyhow::Ok(code),
                (true, None, Some(error)) => {
                    bail!("the identity provider refused the sign-in: {error}")
                }
                _ => continue,
            }
        }
    };
    let code = tokio::time::timeout(Duration::from_secs(300), wait)
        .await
        .context("no sign-in within 5 minutes")??;
    provider
        .exchange_code(&code, &redirect, &pending.verifier, Some(resource))
        .await
        .context("exchanging the sign-in's code")
}

/// The query of a `GET /callback?…` request (the request line only is read).
async fn callback_query(stream: &mut tokio::net::TcpStream) -> Result<String> {
    use tokio::io::AsyncReadExt;
    let mut buffer = vec![0u8; 8192];
    let mut read = 0;
    while !buffer[..read].windows(2).any(|w| w == b"\r\n") && read < buffer.len() {
        let n = stream.read(&mut buffer[read..]).await?;
        if n == 0 {
            break;
        }
        read += n;
    }
    let head = String::from_utf8_lossy(&buffer[..read]);
    let target = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("");
    target
        .strip_prefix("/callback?")
        .map(str::to_string)
        .context("not the sign-in's redirect")
}

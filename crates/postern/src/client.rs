//! The HTTP client of the commands that talk to a running gateway (`connect`, and the
//! operator verbs `approvals` and `review`): over `https://` it trusts the webpki roots, or
//! instead the CAs of `--ca-file`, through the channels crate's rustls configuration (so it
//! trusts what a tool's request would), and always verifies the host name.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// A client builder for `url`. Redirects are not followed: a gateway never sends one, and
/// following it would carry the token elsewhere.
pub fn http_builder(url: &str, ca_file: Option<&Path>) -> Result<reqwest::ClientBuilder> {
    use postern_channels::http::{TlsProfile, TrustedRoots};
    let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    Ok(match (url.starts_with("https://"), ca_file) {
        (false, None) => builder,
        (false, Some(_)) => bail!(
            "--ca-file names the CA that signed the gateway's TLS certificate, but the URL is \
             http://, where no certificate is checked; use https://"
        ),
        (true, ca_file) => {
            let roots = match ca_file {
                None => TrustedRoots::WebPki,
                Some(path) => {
                    let pem = std::fs::read(path)
                        .with_context(|| format!("reading --ca-file {}", path.display()))?;
                    TrustedRoots::from_pem(&pem)
                        .with_context(|| format!("--ca-file {}", path.display()))?
                }
            };
            let profile = TlsProfile::new(&roots, None)?;
            builder.tls_backend_preconfigured(profile.rustls_config().as_ref().clone())
        }
    })
}

/// An environment variable's name as the shell writes it.
pub fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

/// The variable's name for a message, unless it might be a token given by mistake (a long name,
/// or one with many digits, as random tokens have).
pub fn shown_variable(name: &str) -> String {
    let digits = name.chars().filter(char::is_ascii_digit).count();
    if is_variable_name(name) && name.len() <= 40 && digits <= 4 {
        name.to_string()
    } else {
        "named by --token-env (not shown: it looks like a token)".to_string()
    }
}

//! `[console]` and `[[approver.webhook]]`: the operator console's log-in and the links it
//! hands out, and the webhooks that carry approval requests to people.

use std::time::Duration;

use serde::Deserialize;

use super::SecretRef;
use crate::duration::parse_duration;

/// The `[console]` table as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConsole {
    pub public_url: Option<String>,
    pub session_ttl: Option<String>,
    pub sign_in: Option<RawSignIn>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSignIn {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: SecretRef,
    pub scopes: Option<Vec<String>>,
}

/// Operators sign in to the console with OpenID Connect (authorization code with PKCE, `state`
/// and `nonce`) as this confidential client of `issuer` (an `[[issuer]]`); the ID token's
/// claims are matched to an `[[operator]]`'s `claims`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignIn {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: SecretRef,
    /// Asked for besides `openid` (the claims the operators' `claims` need, e.g. `groups`).
    pub scopes: Vec<String>,
}

/// The `[approver]` table as written (`[[approver.webhook]]`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApprover {
    #[serde(default)]
    pub webhook: Vec<RawWebhook>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub url: String,
    pub secret: SecretRef,
}

/// The operator console (`/ui`) and where approval requests are announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Console {
    /// The console's address as people reach it (`https://postern.internal`): the base of the
    /// approval links in URL elicitations and webhooks. `None`: the listener's own address.
    pub public_url: Option<String>,
    /// How long an operator's log-in lasts; after it the next page asks to log in again.
    pub session_ttl: Duration,
    /// Each pending approval request is POSTed, signed, to every one of these.
    pub webhooks: Vec<Webhook>,
    /// Sign-in with the organisation's identity provider, besides operators' static tokens.
    pub sign_in: Option<SignIn>,
}

impl Default for Console {
    fn default() -> Self {
        Console {
            public_url: None,
            session_ttl: Duration::from_secs(8 * 3600),
            webhooks: Vec::new(),
            sign_in: None,
        }
    }
}

/// A receiver of approval requests (a chat bridge, a pager).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    /// `http://` or `https://`.
    pub url: String,
    /// The HMAC-SHA256 key of the `Postern-Signature` header, shared with the receiver.
    pub secret: SecretRef,
}

/// An `http(s)://host…` URL without trailing slashes, or what is wrong with it.
fn http_url(field: &str, text: &str) -> Result<String, String> {
    let url = text.trim_end_matches('/').to_string();
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{field}: {text:?} must be an http:// or https:// URL"))?;
    if rest.is_empty() || rest.starts_with('/') || rest.contains(char::is_whitespace) {
        return Err(format!("{field}: {text:?} names no host"));
    }
    Ok(url)
}

/// `[console.sign_in]`, checked against the issuers and the operators' claims.
fn sign_in(
    raw: Option<RawSignIn>,
    issuers: &[super::Issuer],
    operators: &[super::Operator],
) -> Result<Option<SignIn>, String> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let Some(issuer) = issuers
        .iter()
        .find(|i| super::identity::same_issuer(&i.url, &raw.issuer))
    else {
        return Err(format!(
            "console.sign_in.issuer {:?} is not an [[issuer]]",
            raw.issuer
        ));
    };
    let issuer = issuer.url.clone();
    if raw.client_id.trim().is_empty() {
        return Err("console.sign_in.client_id is empty".into());
    }
    if matches!(raw.client_secret, SecretRef::Vault(_)) {
        return Err("console.sign_in.client_secret cannot come from the vault (operators sign in to unlock it)".into());
    }
    if !operators
        .iter()
        .any(|o| o.claims.as_ref().is_some_and(|c| c.issuer == issuer))
    {
        return Err(format!("console.sign_in: no [[operator]] has claims of issuer {issuer:?}, so no one could sign in with it"));
    }
    let mut scopes = raw
        .scopes
        .unwrap_or_else(|| vec!["profile".into(), "email".into()]);
    scopes.retain(|s| s != "openid");
    if let Some(bad) = scopes.iter().find(|s| s.is_empty() || s.contains(' ')) {
        return Err(format!("console.sign_in.scopes: {bad:?} is not one word"));
    }
    Ok(Some(SignIn {
        issuer,
        client_id: raw.client_id,
        client_secret: raw.client_secret,
        scopes,
    }))
}

pub(super) fn build(
    console: RawConsole,
    approver: RawApprover,
    issuers: &[super::Issuer],
    operators: &[super::Operator],
) -> Result<Console, String> {
    let sign_in = sign_in(console.sign_in, issuers, operators)?;
    let public_url = console
        .public_url
        .map(|u| {
            let url = http_url("console.public_url", &u)?;
            if url.contains(['?', '#']) {
                return Err(format!(
                    "console.public_url: {u:?} must not carry a query or fragment"
                ));
            }
            Ok(url)
        })
        .transpose()?;
    let session_ttl = match console.session_ttl {
        None => Console::default().session_ttl,
        Some(t) => {
            let d = parse_duration(&t).map_err(|e| format!("console.session_ttl: {e}"))?;
            if d < Duration::from_secs(1) || d > Duration::from_secs(7 * 24 * 3600) {
                return Err(format!(
                    "console.session_ttl: {t:?} must be between 1s and 7d"
                ));
            }
            d
        }
    };
    let mut webhooks = Vec::new();
    for w in approver.webhook {
        let url = http_url("approver.webhook.url", &w.url)?;
        if matches!(w.secret, SecretRef::Vault(_)) {
            return Err(format!("approver.webhook {url}: the secret cannot come from the vault (requests are announced while it may be locked)"));
        }
        if webhooks.iter().any(|x: &Webhook| x.url == url) {
            return Err(format!("approver.webhook {url} is declared twice"));
        }
        webhooks.push(Webhook {
            url,
            secret: w.secret,
        });
    }
    if !webhooks.is_empty() && operators.is_empty() {
        return Err("[[approver.webhook]] without an [[operator]]: its links lead to a console no one can log in to".into());
    }
    Ok(Console {
        public_url,
        session_ttl,
        webhooks,
        sign_in,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(url: &str) -> RawApprover {
        RawApprover {
            webhook: vec![RawWebhook {
                url: url.into(),
                secret: SecretRef::Env("HOOK".into()),
            }],
        }
    }

    fn operator(claims: Option<&str>) -> Vec<crate::config::Operator> {
        vec![crate::config::Operator {
            name: "olga".into(),
            token: Some(SecretRef::Env("OP".into())),
            claims: claims.map(|issuer| crate::config::ClaimMatch {
                issuer: issuer.into(),
                subject: None,
                client_id: None,
                group: Some("ops".into()),
            }),
        }]
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        let one = operator(None);
        assert!(build(RawConsole::default(), raw("ftp://x"), &[], &one).is_err());
        assert!(build(RawConsole::default(), raw("http://"), &[], &one).is_err());
        let err = build(RawConsole::default(), raw("http://127.0.0.1:9/h"), &[], &[]).unwrap_err();
        assert!(err.contains("[[operator]]"), "{err}");
        let c = build(
            RawConsole::default(),
            raw("http://127.0.0.1:9/h/"),
            &[],
            &one,
        )
        .unwrap();
        assert_eq!(c.webhooks[0].url, "http://127.0.0.1:9/h");
        let ttl = RawConsole {
            session_ttl: Some("0s".into()),
            ..RawConsole::default()
        };
        assert!(build(ttl, RawApprover::default(), &[], &one).is_err());
        let url = RawConsole {
            public_url: Some("https://p.example/?x".into()),
            ..RawConsole::default()
        };
        assert!(build(url, RawApprover::default(), &[], &one).is_err());
    }

    #[test]
    fn a_sign_in_needs_its_issuer_and_an_operator_it_can_sign_in() {
        let sign_in = |issuer: &str| RawConsole {
            sign_in: Some(RawSignIn {
                issuer: issuer.into(),
                client_id: "console".into(),
                client_secret: SecretRef::Env("S".into()),
                scopes: Some(vec!["openid".into(), "groups".into()]),
            }),
            ..RawConsole::default()
        };
        let issuers = crate::config::identity::issuers(
            vec![crate::config::identity::tests::raw(
                "https://id.example",
                None,
            )],
            &[],
        )
        .unwrap();
        let e = build(
            sign_in("https://other.example"),
            RawApprover::default(),
            &issuers,
            &operator(None),
        )
        .unwrap_err();
        assert!(e.contains("is not an [[issuer]]"), "{e}");
        let e = build(
            sign_in("https://id.example"),
            RawApprover::default(),
            &issuers,
            &operator(None),
        )
        .unwrap_err();
        assert!(e.contains("no one could sign in"), "{e}");
        let c = build(
            sign_in("https://id.example/"),
            RawApprover::default(),
            &issuers,
            &operator(Some("https://id.example")),
        )
        .unwrap();
        assert_eq!(
            c.sign_in.unwrap().scopes,
            ["groups"],
            "openid is always asked"
        );
    }
}

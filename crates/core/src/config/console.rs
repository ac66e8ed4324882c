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
}

impl Default for Console {
    fn default() -> Self {
        Console {
            public_url: None,
            session_ttl: Duration::from_secs(8 * 3600),
            webhooks: Vec::new(),
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

pub(super) fn build(
    console: RawConsole,
    approver: RawApprover,
    operators: usize,
) -> Result<Console, String> {
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
    if !webhooks.is_empty() && operators == 0 {
        return Err("[[approver.webhook]] without an [[operator]]: its links lead to a console no one can log in to".into());
    }
    Ok(Console {
        public_url,
        session_ttl,
        webhooks,
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

    #[test]
    fn refuses_what_it_cannot_use() {
        assert!(build(RawConsole::default(), raw("ftp://x"), 1).is_err());
        assert!(build(RawConsole::default(), raw("http://"), 1).is_err());
        let err = build(RawConsole::default(), raw("http://127.0.0.1:9/h"), 0).unwrap_err();
        assert!(err.contains("[[operator]]"), "{err}");
        let c = build(RawConsole::default(), raw("http://127.0.0.1:9/h/"), 1).unwrap();
        assert_eq!(c.webhooks[0].url, "http://127.0.0.1:9/h");
        let ttl = RawConsole {
            public_url: None,
            session_ttl: Some("0s".into()),
        };
        assert!(build(ttl, RawApprover::default(), 1).is_err());
        let url = RawConsole {
            public_url: Some("https://p.example/?x".into()),
            session_ttl: None,
        };
        assert!(build(url, RawApprover::default(), 1).is_err());
    }
}

//! `[[issuer]]` and an actor's `claims` (issue 50): the identity providers whose JWT access
//! tokens authenticate agents at `/mcp`, and which of a token's claims make it an actor's.
//! A principal is what a verified token says (issuer, subject, client, groups, scopes); the
//! identity crate produces it, and the front matches it to an actor here.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::duration::parse_duration;

/// The longest a verified token or an introspection's answer is believed before it is checked
/// again (a withdrawn key or a revoked token stops working within it).
pub const LONGEST_BELIEF: Duration = Duration::from_secs(300);

/// Algorithms an issuer may sign with: asymmetric only. `none` and the HMAC family are refused
/// at start-up: with a public key as an HMAC secret, anyone could sign.
pub const ASYMMETRIC_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIssuer {
    pub url: String,
    pub audience: Option<String>,
    pub algorithms: Option<Vec<String>>,
    pub leeway: Option<String>,
    pub jwks_refresh: Option<String>,
    pub groups_claim: Option<String>,
    pub tool_scopes: Option<BTreeMap<String, Vec<String>>>,
    pub introspection: Option<RawIntrospection>,
    pub introspection_cache: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIntrospection {
    pub client_id: String,
    pub client_secret: super::SecretRef,
}

/// How Postern asks an issuer about an opaque token (RFC 7662): as this client of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Introspection {
    pub client_id: String,
    pub client_secret: super::SecretRef,
}

/// An identity provider Postern accepts access tokens from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issuer {
    /// Its `iss`, exactly; its metadata is discovered under it.
    pub url: String,
    /// The `aud` a token must carry; `None`: the resource URL `/mcp` was reached at (RFC 8707).
    pub audience: Option<String>,
    pub algorithms: Vec<String>,
    /// Allowed clock difference for `exp` and `nbf`.
    pub leeway: Duration,
    /// At most one fetch of the key set per this, however many unknown key ids arrive.
    pub jwks_refresh: Duration,
    /// The claim that lists the subject's groups (or roles).
    pub groups_claim: String,
    /// The scopes a token of this issuer must carry to call a tool: by tool name, `"PREFIX*"`,
    /// or `"*"` (every tool); every entry that names the tool applies.
    pub tool_scopes: BTreeMap<String, Vec<String>>,
    /// Opaque (non-JWT) tokens are checked at the issuer's introspection endpoint.
    pub introspection: Option<Introspection>,
    /// How long an introspection's answer is believed (at most until the token's `exp`).
    pub introspection_cache: Duration,
}

impl Issuer {
    /// The scopes `tool` needs that `granted` lacks.
    pub fn missing_scopes(&self, tool: &str, granted: &[String]) -> Vec<String> {
        let mut missing: Vec<String> = self
            .tool_scopes
            .iter()
            .filter(|(key, _)| {
                key.as_str() == "*"
                    || key.as_str() == tool
                    || key
                        .strip_suffix('*')
                        .is_some_and(|stem| tool.starts_with(stem))
            })
            .flat_map(|(_, scopes)| scopes)
            .filter(|s| !granted.contains(s))
            .cloned()
            .collect();
        missing.sort();
        missing.dedup();
        missing
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClaims {
    pub issuer: String,
    pub subject: Option<String>,
    pub client_id: Option<String>,
    pub group: Option<String>,
}

/// Which tokens are an actor's: from `issuer`, with every claim given here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimMatch {
    pub issuer: String,
    pub subject: Option<String>,
    pub client_id: Option<String>,
    pub group: Option<String>,
}

/// What a verified access token says about whom a call is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub issuer: String,
    pub subject: String,
    /// `client_id`, else `azp`, `cid` (Okta) or `appid` (Entra ID v1).
    pub client_id: Option<String>,
    pub groups: Vec<String>,
    pub scopes: Vec<String>,
}

impl ClaimMatch {
    pub fn matches(&self, p: &Principal) -> bool {
        self.issuer == p.issuer
            && self.subject.as_ref().is_none_or(|s| *s == p.subject)
            && self
                .client_id
                .as_ref()
                .is_none_or(|c| p.client_id.as_ref() == Some(c))
            && self.group.as_ref().is_none_or(|g| p.groups.contains(g))
    }
}

pub(super) fn issuers(
    raw: Vec<RawIssuer>,
    tools: &[crate::contract::ToolContract],
) -> Result<Vec<Issuer>, String> {
    let mut issuers: Vec<Issuer> = Vec::new();
    for r in raw {
        // Kept as written: a token's `iss` must equal it exactly (Auth0's ends in `/`).
        let url = r.url.clone();
        let field = |key: &str| format!("issuer {url:?}: {key}");
        if !provider_url(&url) {
            return Err(format!(
                "{}: an issuer is an https URL (http only on a loopback address)",
                field("url")
            ));
        }
        if issuers.iter().any(|i| same_issuer(&i.url, &url)) {
            return Err(format!("issuer {url:?} is declared twice"));
        }
        let algorithms = r.algorithms.unwrap_or_else(|| {
            ASYMMETRIC_ALGORITHMS
                .iter()
                .map(|a| a.to_string())
                .collect()
        });
        if algorithms.is_empty() {
            return Err(format!("{}: name at least one", field("algorithms")));
        }
        if let Some(bad) = algorithms
            .iter()
            .find(|a| !ASYMMETRIC_ALGORITHMS.contains(&a.as_str()))
        {
            return Err(format!("{}: {bad:?} is refused: only asymmetric algorithms are accepted ({}); `none` and HMAC (HS*) would let anyone holding the public key sign", field("algorithms"), ASYMMETRIC_ALGORITHMS.join(", ")));
        }
        let duration = |v: &Option<String>, default: &str, key: &str| {
            parse_duration(v.as_deref().unwrap_or(default))
                .map_err(|e| format!("{}: {e}", field(key)))
        };
        let tool_scopes = r.tool_scopes.unwrap_or_default();
        if let Some(unknown) = tool_scopes.keys().find(|k| {
            !k.ends_with('*')
                && !tools.iter().any(|t| &t.name == *k)
                && k.as_str() != crate::contract::EXECUTION_STATUS
        }) {
            return Err(format!(
                "{}: {unknown:?} is no declared tool (a name, \"PREFIX*\" or \"*\")",
                field("tool_scopes")
            ));
        }
        if let Some((tool, _)) = tool_scopes
            .iter()
            .find(|(_, s)| s.is_empty() || s.iter().any(|s| s.is_empty() || s.contains(' ')))
        {
            return Err(format!(
                "{}: {tool:?} needs one or more scopes, each one word",
                field("tool_scopes")
            ));
        }
        if let Some(i) = &r.introspection {
            if i.client_id.trim().is_empty() {
                return Err(format!("{}: client_id is empty", field("introspection")));
            }
            if matches!(i.client_secret, super::SecretRef::Vault(_)) {
                return Err(format!("{}: the client_secret cannot come from the vault (tokens are checked while it may be locked)", field("introspection")));
            }
        }
        let introspection_cache = duration(&r.introspection_cache, "30s", "introspection_cache")?;
        if introspection_cache > LONGEST_BELIEF {
            return Err(format!(
                "{}: at most 5m (a revoked token must stop working soon)",
                field("introspection_cache")
            ));
        }
        if r.introspection.is_none() && r.introspection_cache.is_some() {
            return Err(format!(
                "{}: set only with introspection (it has nothing to cache without it)",
                field("introspection_cache")
            ));
        }
        issuers.push(Issuer {
            introspection: r.introspection.map(|i| Introspection {
                client_id: i.client_id,
                client_secret: i.client_secret,
            }),
            introspection_cache,
            tool_scopes,
            audience: r.audience,
            algorithms,
            leeway: duration(&r.leeway, "60s", "leeway")?,
            jwks_refresh: duration(&r.jwks_refresh, "1m", "jwks_refresh")?,
            groups_claim: r.groups_claim.unwrap_or_else(|| "groups".to_string()),
            url,
        });
    }
    if issuers.iter().filter(|i| i.introspection.is_some()).count() > 1 {
        return Err("introspection is set on more than one [[issuer]]: an opaque token names no issuer, and asking several would hand one provider the tokens of another; keep it on one".into());
    }
    Ok(issuers)
}

/// Whether two issuer URLs as written name the same `[[issuer]]` (a trailing `/` aside; the
/// `[[issuer]]`'s own spelling is the one a token must carry).
pub fn same_issuer(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// `https://…`, or `http://` to a loopback host (a provider on the same machine, tests).
pub fn provider_url(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An actor's or an operator's `claims` (`who` names it), checked against the issuers.
pub(super) fn claims(raw: RawClaims, who: &str, issuers: &[Issuer]) -> Result<ClaimMatch, String> {
    let Some(issuer) = issuers.iter().find(|i| same_issuer(&i.url, &raw.issuer)) else {
        return Err(format!(
            "{who}: claims.issuer {:?} is not an [[issuer]]",
            raw.issuer
        ));
    };
    let issuer = issuer.url.clone();
    if raw.subject.is_none() && raw.client_id.is_none() && raw.group.is_none() {
        return Err(format!("{who}: claims needs a subject, a client_id or a group besides the issuer (any token of the issuer would match)"));
    }
    Ok(ClaimMatch {
        issuer,
        subject: raw.subject,
        client_id: raw.client_id,
        group: raw.group,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::config) fn raw(url: &str, algorithms: Option<&[&str]>) -> RawIssuer {
        RawIssuer {
            url: url.into(),
            audience: None,
            algorithms: algorithms.map(|a| a.iter().map(|s| s.to_string()).collect()),
            leeway: None,
            jwks_refresh: None,
            groups_claim: None,
            tool_scopes: None,
            introspection: None,
            introspection_cache: None,
        }
    }

    fn issuers_of(raw: Vec<RawIssuer>) -> Result<Vec<Issuer>, String> {
        issuers(raw, &[])
    }

    #[test]
    fn a_tool_needs_every_scope_an_entry_naming_it_lists() {
        let mut i = issuers_of(vec![raw("https://id.example", None)])
            .unwrap()
            .remove(0);
        i.tool_scopes = BTreeMap::from([
            ("*".to_string(), vec!["mcp".to_string()]),
            ("books_*".to_string(), vec!["books".to_string()]),
            (
                "pay".to_string(),
                vec!["pay:write".to_string(), "mcp".to_string()],
            ),
        ]);
        let granted = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(i.missing_scopes("pay", &granted(&["mcp"])), ["pay:write"]);
        assert_eq!(
            i.missing_scopes("books_find", &granted(&[])),
            ["books", "mcp"]
        );
        assert!(i.missing_scopes("other", &granted(&["mcp"])).is_empty());
    }

    #[test]
    fn symmetric_algorithms_and_plain_http_elsewhere_are_refused() {
        let e = issuers_of(vec![raw("https://id.example", Some(&["HS256"]))]).unwrap_err();
        assert!(e.contains("\"HS256\" is refused"), "{e}");
        let e = issuers_of(vec![raw("https://id.example", Some(&["none"]))]).unwrap_err();
        assert!(e.contains("\"none\" is refused"), "{e}");
        let e = issuers_of(vec![raw("http://id.example", None)]).unwrap_err();
        assert!(e.contains("https URL"), "{e}");
        let ok = issuers_of(vec![raw("http://127.0.0.1:9000/realms/a/", None)]).unwrap();
        assert_eq!(
            ok[0].url, "http://127.0.0.1:9000/realms/a/",
            "kept as written"
        );
        assert!(!ok[0].algorithms.iter().any(|a| a.starts_with("HS")));
    }

    #[test]
    fn only_one_issuer_may_introspect() {
        let introspecting = |url: &str| RawIssuer {
            introspection: Some(RawIntrospection {
                client_id: "postern".into(),
                client_secret: crate::config::SecretRef::Env("S".into()),
            }),
            ..raw(url, None)
        };
        let e = issuers_of(vec![
            introspecting("https://a.example"),
            introspecting("https://b.example"),
        ])
        .unwrap_err();
        assert!(e.contains("more than one [[issuer]]"), "{e}");
        assert!(issuers_of(vec![
            introspecting("https://a.example"),
            raw("https://b.example", None)
        ])
        .is_ok());
    }

    #[test]
    fn a_principal_matches_every_claim_given() {
        let m = ClaimMatch {
            issuer: "https://id".into(),
            subject: None,
            client_id: Some("ci".into()),
            group: Some("agents".into()),
        };
        let mut p = Principal {
            issuer: "https://id".into(),
            subject: "u1".into(),
            client_id: Some("ci".into()),
            groups: vec!["agents".into()],
            scopes: vec![],
        };
        assert!(m.matches(&p));
        p.groups.clear();
        assert!(!m.matches(&p), "the group is missing");
        p.groups.push("agents".into());
        p.issuer = "https://other".into();
        assert!(!m.matches(&p), "another issuer");
    }
}

//! References to secrets. The config never holds a secret itself, only where to find it; the
//! deserializer refuses an inline string without echoing it (it may be a real token).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};

/// Where a secret lives.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretRef {
    /// An environment variable of the gateway process.
    Env(String),
    /// A file (e.g. the keys `postern init` writes).
    File(String),
    /// An entry of the gateway's vault.
    Vault(String),
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::Env(n) => write!(f, "env:{n}"),
            SecretRef::File(p) => write!(f, "file:{p}"),
            SecretRef::Vault(n) => write!(f, "vault:{n}"),
        }
    }
}

const EXPECTED: &str =
    "a secret reference: { env = \"NAME\" }, { file = \"PATH\" } or { vault = \"NAME\" }";

impl<'de> serde::Deserialize<'de> for SecretRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RefVisitor;
        impl<'de> Visitor<'de> for RefVisitor {
            type Value = SecretRef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<SecretRef, E> {
                Err(E::custom(format!(
                    "secrets are never written inline (value not shown); use {EXPECTED}"
                )))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SecretRef, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<String>()? {
                    let value: String = map.next_value()?;
                    let r = match key.as_str() {
                        "env" => SecretRef::Env(value),
                        "file" => SecretRef::File(value),
                        "vault" => SecretRef::Vault(value),
                        other => {
                            return Err(de::Error::custom(format!(
                                "unknown field `{other}` in secret reference; expected env, file or vault"
                            )))
                        }
                    };
                    if found.replace(r).is_some() {
                        return Err(de::Error::custom(
                            "a secret reference names exactly one source",
                        ));
                    }
                }
                found.ok_or_else(|| {
                    de::Error::custom(format!("empty secret reference; expected {EXPECTED}"))
                })
            }
        }
        d.deserialize_any(RefVisitor)
    }
}

/// One variable of a stdio upstream's `env` table: a plain value (`BOOKS_MODE = "production"`)
/// or a secret reference, read at start-up and given to that upstream's process only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvValue {
    Plain(String),
    Secret(SecretRef),
}

impl<'de> serde::Deserialize<'de> for EnvValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EnvVisitor;
        impl<'de> Visitor<'de> for EnvVisitor {
            type Value = EnvValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a string or {EXPECTED}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EnvValue, E> {
                Ok(EnvValue::Plain(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<EnvValue, A::Error> {
                use serde::Deserialize;
                SecretRef::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(EnvValue::Secret)
            }
        }
        d.deserialize_any(EnvVisitor)
    }
}

impl super::Config {
    /// Every secret reference of the configuration, with what it is for: the gateway takes the
    /// variables they name out of its environment at start-up, and keeps the files they name
    /// out of every upstream's sandbox.
    pub fn secret_refs(&self) -> Vec<(String, &SecretRef)> {
        let g = &self.gateway;
        let mut refs = vec![("the fingerprint key".to_string(), &g.fingerprint_key)];
        refs.extend(g.signing_key.iter().map(|r| ("the signing key".into(), r)));
        refs.extend(
            g.vault_passphrase
                .iter()
                .map(|r| ("the vault's passphrase".into(), r)),
        );
        for a in &self.actors {
            refs.extend(
                a.token
                    .iter()
                    .map(|r| (format!("the token of actor {}", a.name), r)),
            );
        }
        for o in &self.operators {
            refs.extend(
                o.token
                    .iter()
                    .map(|r| (format!("the token of operator {}", o.name), r)),
            );
        }
        for i in &self.issuers {
            refs.extend(i.introspection.iter().map(|x| {
                (
                    format!("the introspection secret for issuer {}", i.url),
                    &x.client_secret,
                )
            }));
        }
        refs.extend(self.console.sign_in.iter().map(|s| {
            (
                "the console's sign-in client secret".to_string(),
                &s.client_secret,
            )
        }));
        for (name, c) in &self.credentials {
            refs.extend(
                c.secret
                    .iter()
                    .map(|r| (format!("the secret of credential {name}"), r)),
            );
            refs.extend(
                c.client_certificate
                    .iter()
                    .map(|cert| (format!("the client key of credential {name}"), &cert.key)),
            );
        }
        for w in &self.console.webhooks {
            refs.push((
                format!("the secret of approver.webhook {}", w.url),
                &w.secret,
            ));
        }
        for (header, r) in &self.telemetry.otlp_headers {
            refs.push((format!("telemetry.otlp_headers.{header}"), r));
        }
        for (name, u) in &self.upstreams {
            if let super::UpstreamTransport::Stdio { env, .. } = &u.transport {
                for (var, value) in env {
                    if let EnvValue::Secret(r) = value {
                        refs.push((format!("upstream.{name}.env.{var}"), r));
                    }
                }
            }
        }
        refs
    }
}

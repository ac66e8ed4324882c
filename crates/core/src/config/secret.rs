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

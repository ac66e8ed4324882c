//! The canonical action record: what the requested effect is, normalised by the tool contract,
//! with every secret replaced by a keyed reference. Its RFC 8785 bytes are what is fingerprinted.

use std::fmt;

use serde_json::{Map, Value};

use crate::canon::{self, CanonError};
use crate::contract::{ChannelKind, ToolContract};
use crate::fingerprint::{Fingerprint, FingerprintKey};

/// Why arguments could not become an action record. Never contains an argument's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("tool arguments must be a JSON object")]
    NotAnObject,
    #[error("actor must not be empty")]
    EmptyActor,
    #[error("invalid arguments: {0}")]
    Canon(#[from] CanonError),
}

/// A tool call's arguments as received. `Debug` shows only the keys: a value may be a secret.
#[derive(Clone, PartialEq)]
pub struct Arguments(Map<String, Value>);

impl Arguments {
    /// Parses raw JSON text strictly (duplicate keys and inexact numbers are refused).
    pub fn parse(text: &str) -> Result<Self, RecordError> {
        Self::from_value(canon::parse_strict(text)?)
    }

    /// Wraps an already-parsed value (its numbers are still checked).
    pub fn from_value(value: Value) -> Result<Self, RecordError> {
        canon::check_numbers(&value)?;
        match value {
            Value::Object(map) => Ok(Arguments(map)),
            _ => Err(RecordError::NotAnObject),
        }
    }

    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    pub fn into_map(self) -> Map<String, Value> {
        self.0
    }
}

impl fmt::Debug for Arguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arguments")
            .field("keys", &self.0.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The canonical description of a requested effect. Contains no secrets by construction.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ActionRecord {
    pub actor: String,
    pub tool: String,
    pub channel: ChannelKind,
    pub target: String,
    pub credential_ref: Option<String>,
    pub method: String,
    pub arguments: Map<String, Value>,
    pub intent_scope: String,
}

impl ActionRecord {
    /// Normalises `arguments` by the contract: defaults filled in, non-semantic fields dropped,
    /// secret fields replaced by `secret:hmac-sha256:<hex>`. The intent scope defaults to the actor.
    pub fn build(
        contract: &ToolContract,
        actor: &str,
        intent_scope: Option<&str>,
        arguments: &Arguments,
        key: &FingerprintKey,
    ) -> Result<ActionRecord, RecordError> {
        if actor.is_empty() {
            return Err(RecordError::EmptyActor);
        }
        let rules = &contract.arguments;
        let mut normalised = Map::new();
        for (name, value) in &arguments.0 {
            if rules.non_semantic.contains(name) {
                continue;
            }
            let value = if rules.secret.contains(name) {
                Value::String(key.secret_reference(&canon::canonical_bytes(value)?))
            } else {
                value.clone()
            };
            normalised.insert(name.clone(), value);
        }
        for (name, default) in &rules.defaults {
            normalised
                .entry(name.clone())
                .or_insert_with(|| default.clone());
        }
        Ok(ActionRecord {
            actor: actor.to_string(),
            tool: contract.name.clone(),
            channel: contract.channel.channel(),
            target: contract.channel.target(),
            credential_ref: contract.channel.credential_ref().map(str::to_string),
            method: contract.channel.method(),
            arguments: normalised,
            intent_scope: intent_scope.unwrap_or(actor).to_string(),
        })
    }

    /// RFC 8785 bytes of the record, computed on every call (fingerprint, accepted record).
    /// Written through a `Value` by the fast canonical writer instead of `serde_jcs` (which
    /// re-parses every object key); every number in a record already sits in a parsed `Value`,
    /// so nothing changes on the way. Pinned to `serde_jcs` by a property test and the golden
    /// record test.
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, CanonError> {
        let value = serde_json::to_value(self).map_err(|e| CanonError::Serialize(e.to_string()))?;
        let mut out = Vec::with_capacity(256);
        canon::write_canonical(&value, &mut out)?;
        Ok(out)
    }

    /// The intent fingerprint of the record.
    pub fn fingerprint(&self, key: &FingerprintKey) -> Result<Fingerprint, CanonError> {
        Ok(key.fingerprint(&self.canonical_bytes()?))
    }
}

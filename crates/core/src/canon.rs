//! Canonical JSON (RFC 8785, via `serde_jcs`) and the strict parser that feeds it.
//!
//! A fingerprint is only as good as its bytes, so the traps that would make two different
//! requests canonicalise alike are refused here, each with its own error:
//! numbers outside ±2^53 (they cannot round-trip through an IEEE double), non-finite numbers,
//! and duplicate object keys (serde_json would silently keep the last one).
//!
//! Errors name the JSON path of the offending value, never the value itself: the value may be
//! a secret.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The largest magnitude a JSON number may have: 2^53. Every double beyond it is an integer
/// that other parsers may round differently, so the request is refused rather than guessed.
pub const MAX_EXACT_NUMBER: f64 = 9_007_199_254_740_992.0;

/// Why a JSON text or value cannot be canonicalised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonError {
    #[error("duplicate object key {key:?} at {path}: send each key once")]
    DuplicateKey { path: String, key: String },
    #[error(
        "number at {path} is outside ±2^53 and cannot be represented exactly: send it as a string"
    )]
    NumberOutOfRange { path: String },
    #[error("number at line {line}, column {column} is not finite (overflows an IEEE double)")]
    NonFiniteNumber { line: usize, column: usize },
    #[error("malformed JSON at line {line}, column {column}: {reason}")]
    Malformed {
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("could not canonicalise: {0}")]
    Serialize(String),
}

/// Parses JSON text, refusing duplicate keys and numbers that cannot be canonicalised exactly.
pub fn parse_strict(text: &str) -> Result<Value, CanonError> {
    let violation = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = StrictSeed {
        path: String::new(),
        violation: &violation,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(v) => Ok(v),
        Err(e) => {
            if let Some(v) = violation.into_inner() {
                return Err(v);
            }
            let msg = e.to_string();
            if msg.starts_with("number out of range") {
                return Err(CanonError::NonFiniteNumber {
                    line: e.line(),
                    column: e.column(),
                });
            }
            let reason = msg
                .split(" at line ")
                .next()
                .unwrap_or(msg.as_str())
                .to_string();
            Err(CanonError::Malformed {
                line: e.line(),
                column: e.column(),
                reason,
            })
        }
    }
}

/// Checks an already-parsed value for numbers that cannot be canonicalised exactly.
/// (Duplicate keys cannot be seen any more once a text became a `Value`; use
/// [`parse_strict`] on raw input.)
pub fn check_numbers(value: &Value) -> Result<(), CanonError> {
    fn walk(value: &Value, path: &mut String) -> Result<(), CanonError> {
        match value {
            Value::Number(n) => check_number(n, path),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("/{i}"));
                    walk(item, path)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Object(map) => {
                for (k, item) in map {
                    let len = path.len();
                    push_pointer(path, k);
                    walk(item, path)?;
                    path.truncate(len);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(value, &mut String::new())
}

fn check_number(n: &Number, path: &str) -> Result<(), CanonError> {
    let out_of_range = if let Some(i) = n.as_i64() {
        i.unsigned_abs() > MAX_EXACT_NUMBER as u64
    } else if let Some(u) = n.as_u64() {
        u > MAX_EXACT_NUMBER as u64
    } else {
        // serde_json never holds a non-finite f64, so only the magnitude is left to check.
        n.as_f64().is_none_or(|f| f.abs() > MAX_EXACT_NUMBER)
    };
    if out_of_range {
        Err(CanonError::NumberOutOfRange {
            path: display_path(path),
        })
    } else {
        Ok(())
    }
}

/// RFC 8785 canonical bytes of a value (after checking its numbers).
pub fn canonical_bytes<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CanonError> {
    serde_jcs::to_vec(value).map_err(|e| CanonError::Serialize(e.to_string()))
}

/// Canonical bytes of a JSON value, refusing numbers that cannot be represented exactly.
pub fn canonical_value_bytes(value: &Value) -> Result<Vec<u8>, CanonError> {
    check_numbers(value)?;
    canonical_bytes(value)
}

fn push_pointer(path: &mut String, key: &str) {
    path.push('/');
    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "/".to_string()
    } else {
        path.to_string()
    }
}

struct StrictSeed<'a> {
    path: String,
    violation: &'a RefCell<Option<CanonError>>,
}

impl StrictSeed<'_> {
    fn fail<E: de::Error>(&self, err: CanonError) -> E {
        let msg = err.to_string();
        *self.violation.borrow_mut() = Some(err);
        E::custom(msg)
    }

    fn child(&self, path: String) -> Self {
        StrictSeed {
            path,
            violation: self.violation,
        }
    }
}

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        let n = Number::from(v);
        check_number(&n, &self.path).map_err(|e| self.fail(e))?;
        Ok(Value::Number(n))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        let n = Number::from(v);
        check_number(&n, &self.path).map_err(|e| self.fail(e))?;
        Ok(Value::Number(n))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        let Some(n) = Number::from_f64(v) else {
            return Err(E::custom("number out of range"));
        };
        check_number(&n, &self.path).map_err(|e| self.fail(e))?;
        Ok(Value::Number(n))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) =
            seq.next_element_seed(self.child(format!("{}/{}", self.path, items.len())))?
        {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let mut path = self.path.clone();
            push_pointer(&mut path, &key);
            if out.contains_key(&key) {
                return Err(self.fail(CanonError::DuplicateKey {
                    path: display_path(&self.path),
                    key,
                }));
            }
            let value = map.next_value_seed(self.child(path))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

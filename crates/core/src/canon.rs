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
        path: &JsonPath::Root,
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
    if number_in_range(n) {
        Ok(())
    } else {
        Err(CanonError::NumberOutOfRange {
            path: display_path(path),
        })
    }
}

/// Whether a number is within ±2^53 (exactly representable).
fn number_in_range(n: &Number) -> bool {
    if let Some(i) = n.as_i64() {
        i.unsigned_abs() <= MAX_EXACT_NUMBER as u64
    } else if let Some(u) = n.as_u64() {
        u <= MAX_EXACT_NUMBER as u64
    } else {
        // serde_json never holds a non-finite f64, so only the magnitude is left to check.
        n.as_f64().is_some_and(|f| f.abs() <= MAX_EXACT_NUMBER)
    }
}

/// RFC 8785 canonical bytes of a value (after checking its numbers).
pub fn canonical_bytes<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CanonError> {
    serde_jcs::to_vec(value).map_err(|e| CanonError::Serialize(e.to_string()))
}

/// Appends the RFC 8785 bytes of `value` to `out`, without the intermediate allocations of
/// `serde_jcs` (which re-parses every object key). Used on hot paths — the audit chain hashes
/// every event with it — and pinned to `serde_jcs` byte for byte by a property test.
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) -> Result<(), CanonError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => write_canonical_int(i128::from(i), out)?,
            (None, Some(u)) => write_canonical_int(i128::from(u), out)?,
            _ => out.extend_from_slice(&canonical_bytes(n)?),
        },
        Value::String(s) => write_canonical_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // serde_json's map is ordered by UTF-8 bytes; RFC 8785 orders by UTF-16 code units.
            // The two agree unless a key holds characters above U+FFFF next to U+E000..U+FFFF.
            if !entries.iter().all(|(k, _)| k.is_ascii()) {
                entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            }
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical_str(k, out);
                out.push(b':');
                write_canonical(v, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// An integer as RFC 8785 writes it: exact up to 2^53, beyond that as the IEEE double it
/// becomes (what every other implementation will read).
pub fn write_canonical_int(i: i128, out: &mut Vec<u8>) -> Result<(), CanonError> {
    if i.unsigned_abs() <= MAX_EXACT_NUMBER as u128 {
        // Fits an i64: its formatting is much cheaper than i128's, and every event hash
        // writes three of these.
        use std::io::Write;
        let _ = write!(out, "{}", i as i64);
        Ok(())
    } else {
        out.extend_from_slice(&canonical_bytes(&(i as f64))?);
        Ok(())
    }
}

/// A JSON string as RFC 8785 writes it (the same escapes as ECMAScript's JSON.stringify).
pub fn write_canonical_str(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    // Most strings need no escape at all: one pass to check, one copy. The check folds each
    // chunk without stopping early, which the compiler turns into vector compares (about a
    // quarter of the instructions of a byte-by-byte `any`, measured by callgrind).
    let needs_escape = |chunk: &[u8]| {
        chunk.iter().fold(false, |hit, &b| {
            hit | (b < 0x20) | (b == b'"') | (b == b'\\')
        })
    };
    if !bytes.chunks(32).any(needs_escape) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(b >> 4) as usize],
                    HEX[(b & 15) as usize],
                ]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
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

/// Where a value sits, as a chain of borrowed segments up to the root: building it costs
/// nothing per element, and the pointer text is only written when an error reports it (a path
/// string per element made parsing quadratic in the nesting and in the length of keys).
enum JsonPath<'p> {
    Root,
    Index(&'p JsonPath<'p>, usize),
    Key(&'p JsonPath<'p>, &'p str),
}

impl JsonPath<'_> {
    /// The JSON pointer text (`/` for the root).
    fn pointer(&self) -> String {
        let mut segments = Vec::new();
        let mut at = self;
        loop {
            match at {
                JsonPath::Root => break,
                JsonPath::Index(parent, i) => {
                    segments.push(i.to_string());
                    at = parent;
                }
                JsonPath::Key(parent, k) => {
                    segments.push(k.replace('~', "~0").replace('/', "~1"));
                    at = parent;
                }
            }
        }
        if segments.is_empty() {
            return "/".to_string();
        }
        segments.iter().rev().fold(String::new(), |mut out, s| {
            out.push('/');
            out.push_str(s);
            out
        })
    }
}

struct StrictSeed<'p> {
    path: &'p JsonPath<'p>,
    violation: &'p RefCell<Option<CanonError>>,
}

impl<'p> StrictSeed<'p> {
    fn fail<E: de::Error>(&self, err: CanonError) -> E {
        let msg = err.to_string();
        *self.violation.borrow_mut() = Some(err);
        E::custom(msg)
    }

    fn child<'q>(&self, path: &'q JsonPath<'q>) -> StrictSeed<'q>
    where
        'p: 'q,
    {
        StrictSeed {
            path,
            violation: self.violation,
        }
    }

    fn check(&self, n: &Number) -> Result<(), CanonError> {
        if number_in_range(n) {
            Ok(())
        } else {
            Err(CanonError::NumberOutOfRange {
                path: self.path.pointer(),
            })
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
        self.check(&n).map_err(|e| self.fail(e))?;
        Ok(Value::Number(n))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        let n = Number::from(v);
        self.check(&n).map_err(|e| self.fail(e))?;
        Ok(Value::Number(n))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        let Some(n) = Number::from_f64(v) else {
            return Err(E::custom("number out of range"));
        };
        self.check(&n).map_err(|e| self.fail(e))?;
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
        loop {
            let at = JsonPath::Index(self.path, items.len());
            match seq.next_element_seed(self.child(&at))? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(self.fail(CanonError::DuplicateKey {
                    path: self.path.pointer(),
                    key,
                }));
            }
            let at = JsonPath::Key(self.path, &key);
            let value = map.next_value_seed(self.child(&at))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

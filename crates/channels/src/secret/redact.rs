//! Removing the credential from what a target answers.

/// What a secret is replaced by.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// Copies `bytes[..limit]` with every occurrence of a needle replaced by [`REDACTED`], then cuts
/// the result to `cap` bytes.
///
/// An occurrence that starts before `limit` is replaced whole even if it runs past `limit`
/// (which is why the caller keeps up to `longest needle - 1` bytes beyond the cap), and the cut
/// happens only after replacing, so a secret can never survive in part across the cap.
/// Needles must be non-empty and sorted longest first.
pub fn redact(bytes: &[u8], limit: usize, cap: usize, needles: &[Vec<u8>]) -> Vec<u8> {
    let limit = limit.min(bytes.len());
    if needles.is_empty() {
        let mut out = bytes[..limit].to_vec();
        out.truncate(cap);
        return out;
    }
    let mut out = Vec::with_capacity(limit.min(cap) + REDACTED.len());
    let mut i = 0;
    while i < limit && out.len() < cap {
        match needles.iter().find(|n| bytes[i..].starts_with(n)) {
            Some(needle) => {
                out.extend_from_slice(REDACTED);
                i += needle.len();
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out.truncate(cap);
    out
}

/// [`redact`] for a header value, kept whole.
pub fn redact_text(text: &str, needles: &[Vec<u8>]) -> String {
    if needles.is_empty() {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    String::from_utf8_lossy(&redact(bytes, bytes.len(), usize::MAX, needles)).into_owned()
}

/// [`redact`] for an answer, seeing through JSON's escapes: a target may write a secret with
/// any of its characters escaped (`\u002B`, `\/`: System.Text.Json and PHP do by default), which
/// no byte form of it matches, and the reader decodes it whole. So where the answer holds an
/// escape, its decoded text is searched too: in a JSON document every string (and key) is
/// decoded and redacted as text, and the document written again when one held a secret; in
/// anything else (or a document cut short) the escapes are decoded in place first when that
/// uncovers a secret.
pub fn redact_answer(bytes: &[u8], limit: usize, cap: usize, needles: &[Vec<u8>]) -> Vec<u8> {
    let limit = limit.min(bytes.len());
    if needles.is_empty() || !bytes[..limit].contains(&b'\\') {
        return redact(bytes, limit, cap, needles);
    }
    if let Ok(mut document) = serde_json::from_slice::<serde_json::Value>(&bytes[..limit]) {
        if redact_strings(&mut document, needles) {
            let written = serde_json::to_vec(&document).unwrap_or_default();
            return redact(&written, written.len(), cap, needles);
        }
        return redact(bytes, limit, cap, needles);
    }
    let decoded = unescape(&bytes[..limit]);
    let plain = redact(&decoded, decoded.len(), usize::MAX, needles);
    if plain != decoded {
        let mut plain = plain;
        plain.truncate(cap);
        return plain;
    }
    redact(bytes, limit, cap, needles)
}

/// Redacts every string and object key of `value` as text; whether any held a secret.
fn redact_strings(value: &mut serde_json::Value, needles: &[Vec<u8>]) -> bool {
    use serde_json::Value;
    let clean = |s: &str| {
        let r = redact_text(s, needles);
        (r != s).then_some(r)
    };
    match value {
        Value::String(s) => clean(s).map(|r| *s = r).is_some(),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |hit, v| redact_strings(v, needles) | hit),
        Value::Object(map) => {
            let mut hit = false;
            let entries = std::mem::take(map);
            for (key, mut v) in entries {
                hit |= redact_strings(&mut v, needles);
                let key = clean(&key).inspect(|_| hit = true).unwrap_or(key);
                map.insert(key, v);
            }
            hit
        }
        _ => false,
    }
}

/// `bytes` with JSON's escapes decoded (`\uXXXX` with surrogate pairs joined, `\/`, `\"`,
/// `\\`, `\n`, `\t`, `\r`); every other byte as it is. Lenient: for text that is not (or no longer) a whole JSON document.
fn unescape(bytes: &[u8]) -> Vec<u8> {
    let hex = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let simple = match (bytes[i], bytes.get(i + 1)) {
            (b'\\', Some(b'/')) => Some(b'/'),
            (b'\\', Some(b'"')) => Some(b'"'),
            (b'\\', Some(b'\\')) => Some(b'\\'),
            (b'\\', Some(b'n')) => Some(b'\n'),
            (b'\\', Some(b't')) => Some(b'\t'),
            (b'\\', Some(b'r')) => Some(b'\r'),
            _ => None,
        };
        if let Some(b) = simple {
            out.push(b);
            i += 2;
            continue;
        }
        if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'u') {
            if let Some(unit) = hex(i + 2) {
                let pair = (0xD800..0xDC00).contains(&unit)
                    && bytes.get(i + 6..i + 8) == Some(b"\\u".as_slice());
                let (c, used) = match (pair, hex(i + 8)) {
                    (true, Some(low)) if (0xDC00..0xE000).contains(&low) => (
                        char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)),
                        12,
                    ),
                    _ => (char::from_u32(unit), 6),
                };
                if let Some(c) = c {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    i += used;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod decoded_tests {
    use super::*;
    use crate::secret::secret_forms;

    #[test]
    fn a_secret_written_with_json_escapes_is_redacted() {
        let needles = secret_forms("SECRET+PLUS/tok=TOKEN-123");
        let body = br#"{"received":"SECRET\u002BPLUS\/tok=TOKEN-123","n":1}"#;
        let out = redact_answer(body, body.len(), usize::MAX, &needles);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["received"], "[REDACTED]");
        assert_eq!(v["n"], 1);
        // Every character escaped, in a body that is not JSON (cut short).
        let all: String = "SECRET+PLUS/tok=TOKEN-123"
            .chars()
            .map(|c| format!("\\u{:04X}", c as u32))
            .collect();
        let cut = format!("{{\"x\":\"{all}\",\"y\":\"unfinished");
        let out = redact_answer(cut.as_bytes(), cut.len(), usize::MAX, &needles);
        assert!(!String::from_utf8_lossy(&out).contains("TOKEN-123"));
        assert!(String::from_utf8_lossy(&out).contains("[REDACTED]"));
        // Nothing escaped to decode: the bytes are the byte scan's.
        let plain = br#"{"a":"no secret here \\ at all"}"#;
        assert_eq!(
            redact_answer(plain, plain.len(), usize::MAX, &needles),
            plain.to_vec()
        );
    }
}

//! Removing the credential from what a target answers: redacted whole, then cut.

use super::escaped::{read, Found};

/// What a secret is replaced by.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// How many bytes past the cap an answer must be read for a secret that starts before the cap
/// to be seen whole: the longest needle with every character written as a six-byte `\uXXXX`
/// escape (no escape is longer per byte it decodes to).
pub fn lookahead(needles: &[Vec<u8>]) -> usize {
    needles
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .saturating_mul(6)
}

/// `bytes` with every occurrence of a needle replaced by [`REDACTED`], then cut to `cap` bytes.
///
/// The whole of `bytes` is redacted before anything is cut, and a needle is found as written
/// and behind any JSON escapes (see [`read`]), so an occurrence that starts before the cap is
/// replaced whole: the caller reads [`lookahead`] bytes beyond the cap for that. Where the cut
/// falls in plain text, a tail that reads as the beginning of any needle (a secret the cap or
/// the end of what was read cuts short, written plainly or escaped, or an escape cut in two)
/// is dropped too. `whole` says `bytes` is all the target sent; when it is not, the end of
/// `bytes` is such a cut whatever `cap` is. Needles must be non-empty and sorted longest first.
pub fn redact_answer(bytes: &[u8], cap: usize, needles: &[Vec<u8>], whole: bool) -> Vec<u8> {
    let spans = spans(bytes, needles);
    let mut out = Vec::with_capacity(bytes.len().min(cap));
    let mut at = 0;
    for (start, end) in spans.into_iter().chain([(bytes.len(), bytes.len())]) {
        let room = cap.saturating_sub(out.len());
        if start - at > room {
            let keep = before_partial(bytes, at, at + room, needles);
            out.extend_from_slice(&bytes[at..keep]);
            return out;
        }
        out.extend_from_slice(&bytes[at..start]);
        if start == bytes.len() {
            break;
        }
        let room = cap.saturating_sub(out.len());
        out.extend_from_slice(&REDACTED[..REDACTED.len().min(room)]);
        if REDACTED.len() >= room {
            return out;
        }
        at = end;
    }
    if !whole {
        let dropped = bytes.len() - before_partial(bytes, at, bytes.len(), needles);
        out.truncate(out.len() - dropped);
    }
    out
}

/// [`redact_answer`] for a header value, kept whole.
pub fn redact_text(text: &str, needles: &[Vec<u8>]) -> String {
    if needles.is_empty() {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    String::from_utf8_lossy(&redact_answer(bytes, usize::MAX, needles, true)).into_owned()
}

/// Where the needles occur in `bytes`, as written or behind JSON escapes: `[start, end)`
/// ranges in order, not overlapping; at each place the longest needle wins.
fn spans(bytes: &[u8], needles: &[Vec<u8>]) -> Vec<(usize, usize)> {
    // The needles that can start at a byte: those that begin with it, and at a backslash
    // (an escape may begin any of them) every one. Longest first in each.
    let all: Vec<&[u8]> = needles
        .iter()
        .filter(|n| !n.is_empty())
        .map(Vec::as_slice)
        .collect();
    let mut by_first: Vec<Vec<&[u8]>> = vec![Vec::new(); 256];
    for &needle in &all {
        by_first[usize::from(needle[0])].push(needle);
    }
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let candidates = match bytes[i] {
            b'\\' => &all,
            b => &by_first[usize::from(b)],
        };
        let end = candidates.iter().find_map(|n| {
            if bytes[i..].starts_with(n) {
                return Some(i + n.len());
            }
            match read(bytes, i, n) {
                Found::Whole(end) => Some(end),
                Found::Prefix | Found::No => None,
            }
        });
        match end {
            Some(end) => {
                spans.push((i, end));
                i = end;
            }
            None => i += 1,
        }
    }
    spans
}

/// Where text kept up to `end` should stop: before the longest tail of `bytes[from..end]` that
/// reads as the beginning of a needle (the text is taken to end at `end`).
fn before_partial(bytes: &[u8], from: usize, end: usize, needles: &[Vec<u8>]) -> usize {
    let text = &bytes[..end];
    let start = from.max(end.saturating_sub(lookahead(needles)));
    (start..end)
        .find(|&i| {
            needles
                .iter()
                .filter(|n| !n.is_empty())
                .any(|n| n.starts_with(&text[i..]) || !matches!(read(text, i, n), Found::No))
        })
        .unwrap_or(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::secret_forms;

    fn all(bytes: &[u8], needles: &[Vec<u8>]) -> Vec<u8> {
        redact_answer(bytes, usize::MAX, needles, true)
    }

    #[test]
    fn a_secret_written_with_json_escapes_is_redacted() {
        let needles = secret_forms("SECRET+PLUS/tok=TOKEN-123");
        let body = br#"{"received":"SECRET\u002BPLUS\/tok=TOKEN-123","n":1}"#;
        let v: serde_json::Value = serde_json::from_slice(&all(body, &needles)).unwrap();
        assert_eq!(v["received"], "[REDACTED]");
        assert_eq!(v["n"], 1);
        // Every character escaped, in a body that is not JSON (cut short).
        let every: String = "SECRET+PLUS/tok=TOKEN-123"
            .chars()
            .map(|c| format!("\\u{:04X}", c as u32))
            .collect();
        let cut = format!("{{\"x\":\"{every}\",\"y\":\"unfinished");
        let out = String::from_utf8(all(cut.as_bytes(), &needles)).unwrap();
        assert_eq!(out, "{\"x\":\"[REDACTED]\",\"y\":\"unfinished");
        // Nothing escaped to decode: the bytes as they were.
        let plain = br#"{"a":"no secret here \\ at all"}"#;
        assert_eq!(all(plain, &needles), plain.to_vec());
    }

    #[test]
    fn the_cap_never_cuts_a_secret_or_an_escape_in_two() {
        let needles = secret_forms("SuperSecretApiToken+/=12");
        let written = br#"{"h":"Bearer SuperSecretApiToken\u002B/=12"}"#;
        let start = 13;
        for cap in 0..written.len() {
            let out = redact_answer(written, cap, &needles, true);
            assert!(out.len() <= cap, "{cap}");
            let text = String::from_utf8_lossy(&out);
            if cap <= start {
                // Cut before the secret, and before any tail that could begin it.
                assert!(
                    !text.contains("Su") && !text.contains('\\'),
                    "{cap}: {text}"
                );
            } else {
                assert!(!text.contains("Sup"), "{cap}: {text}");
            }
        }
        // What was read stops inside the secret (the target stopped, or the read did).
        for read in [30, 34, 36, 39] {
            let out = redact_answer(&written[..read], usize::MAX, &needles, false);
            assert_eq!(out, br#"{"h":"Bearer "#, "{read}");
        }
    }

    #[test]
    fn base64_of_a_longer_text_is_redacted_at_every_alignment() {
        let secret = "SuperSecretApiToken+/=12";
        let needles = secret_forms(secret);
        for before in [
            "",
            "x",
            "xy",
            "Bearer ",
            "GET / HTTP/1.1\r\nauthorization: Bearer ",
        ] {
            let text = format!("{before}{secret} and more after it");
            let encoded = crate::secret::base64(text.as_bytes());
            let out = String::from_utf8(all(encoded.as_bytes(), &needles)).unwrap();
            assert!(out.contains("[REDACTED]"), "{before:?}: {out}");
            for k in 0..3 {
                let core = crate::secret::base64_cores(secret.as_bytes());
                assert!(!out.contains(&core[k][..4]), "{before:?}: {out}");
            }
        }
    }
}

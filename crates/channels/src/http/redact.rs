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

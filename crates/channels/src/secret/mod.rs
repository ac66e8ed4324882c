//! Credentials injected into a request, the secret wrapper that keeps them out of logs, and
//! the redaction of every form of a secret from what a target answers ([`redact_answer`]).
//! Shared by every channel (HTTP, SSH, MCP), so it is a leaf: it imports no channel.
//!
//! What counts as a form of a secret ([`secret_forms`]): the secret raw, cased, hex,
//! percent-encoded, JSON-escaped, and base64 (standard and URL-safe) standing alone and inside a
//! longer encoded text: for each of the three byte alignments (the secret preceded by 0, 1 or 2
//! other bytes) the characters that depend on the secret alone, so that a target echoing the
//! whole request base64-encoded is caught. A form is also found behind JSON escapes of any
//! subset of its characters (`+` as `\u002B`, `/` as `\/`).
//!
//! Redaction comes before the cap (issue 49): an answer is read up to its cap plus
//! [`lookahead`] bytes (the longest form with every character escaped), redacted whole, and
//! only then cut; where the cut falls in plain text, a tail that reads as the beginning of any
//! form (or an escape cut in two) is dropped, and so is such a tail where the read stopped
//! early. So no part of a secret's form that the cap or an early end cuts short reaches the
//! stored answer.

mod escaped;
mod redact;

use std::fmt;

use postern_core::config::CredentialKind;

use crate::ChannelError;

pub(crate) use redact::redact_text;
pub use redact::{lookahead, redact_answer, REDACTED};

/// A secret value. `Debug` prints `<redacted>`; the value is only reachable through
/// [`Secret::expose`], which the channel calls when it builds the request.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value itself. Call only to put it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How a credential is put on an HTTP request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// `Authorization: Bearer <token>`.
    Bearer(Secret),
    /// `Authorization: Basic base64(username:password)`.
    Basic { username: String, password: Secret },
    /// `<name>: <value>`.
    Header { name: String, value: Secret },
    /// An OpenSSH private key (an `ssh_key` credential): the SSH channel's, never on an HTTP
    /// request.
    PrivateKey(Secret),
}

impl Credential {
    /// The HTTP credential for a configured credential kind and its resolved secret. An
    /// `ssh_key` credential is not an HTTP credential, and an `mtls` one adds no header.
    pub fn from_kind(kind: &CredentialKind, secret: Secret) -> Result<Credential, ChannelError> {
        match kind {
            CredentialKind::Bearer => Ok(Credential::Bearer(secret)),
            CredentialKind::Basic { username } => Ok(Credential::Basic {
                username: username.clone(),
                password: secret,
            }),
            CredentialKind::Header { name } => Ok(Credential::Header {
                name: name.clone(),
                value: secret,
            }),
            CredentialKind::SshKey => Ok(Credential::PrivateKey(secret)),
            CredentialKind::Mtls => Err(ChannelError::Credential {
                reason: "an mtls credential puts no header on a request: its client certificate is shown in the TLS handshake (see ClientIdentity)".to_string(),
            }),
        }
    }

    /// The header this credential adds: (name, value). The value holds the secret. `None`
    /// for a private key, which no HTTP request carries.
    pub(crate) fn header(&self) -> Option<(String, Secret)> {
        Some(match self {
            Credential::Bearer(token) => (
                "authorization".to_string(),
                Secret(format!("Bearer {}", token.expose())),
            ),
            Credential::Basic { username, password } => (
                "authorization".to_string(),
                Secret(format!("Basic {}", basic_token(username, password))),
            ),
            Credential::Header { name, value } => (name.clone(), value.clone()),
            Credential::PrivateKey(_) => return None,
        })
    }

    /// Every form of the secret that must never come back out of the channel: the raw secret,
    /// and for basic auth also the base64 `username:password` token. Empty forms are skipped.
    pub(crate) fn redaction_needles(&self) -> Vec<Vec<u8>> {
        match self {
            Credential::Bearer(token) => secret_forms(token.expose()),
            Credential::Basic { username, password } => {
                let mut needles = secret_forms(password.expose());
                needles.extend(secret_forms(&basic_token(username, password)));
                sorted(needles)
            }
            Credential::Header { value, .. } => secret_forms(value.expose()),
            Credential::PrivateKey(key) => key
                .expose()
                .lines()
                .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
                .flat_map(secret_forms)
                .collect(),
        }
    }
}

/// Every form in which a target may echo `secret`: raw, upper- and lower-cased, hex, base64
/// (standard and URL-safe, with and without padding, and the cores of `base64_cores` that
/// stand inside the base64 of a longer text), percent-encoded (upper- and lower-case hex) and
/// JSON-escaped (as serde writes it, with `/` escaped, and with everything outside ASCII as
/// `\uXXXX`). Longest first, without repeats or empty forms.
pub fn secret_forms(secret: &str) -> Vec<Vec<u8>> {
    if secret.is_empty() {
        return Vec::new();
    }
    let bytes = secret.as_bytes();
    let std = base64(bytes);
    let url_safe = std.replace('+', "-").replace('/', "_");
    let mut forms = vec![
        secret.to_string(),
        std.trim_end_matches('=').to_string(),
        url_safe.trim_end_matches('=').to_string(),
        std,
        url_safe,
    ];
    for core in base64_cores(bytes) {
        forms.push(core.replace('+', "-").replace('/', "_"));
        forms.push(core);
    }
    // Hex (either case), and the secret in upper and lower case (a target that echoes it
    // normalised); a case-changed form is kept only when it is as long as the secret.
    let hex_lower = hex::encode(bytes);
    forms.push(hex_lower.to_ascii_uppercase());
    forms.push(hex_lower);
    for cased in [secret.to_uppercase(), secret.to_lowercase()] {
        if cased.len() == secret.len() {
            forms.push(cased);
        }
    }
    let upper = percent_encode(secret);
    forms.push(percent_lower(&upper));
    forms.push(upper);
    let json = serde_json::to_string(secret).unwrap_or_default();
    // The quotes around it, one at each end (a secret ending in `"` ends in `\"`).
    let json = json
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or_default()
        .to_string();
    forms.push(json.replace('/', "\\/"));
    let ascii: String = json
        .chars()
        .flat_map(|c| {
            if c.is_ascii() {
                vec![c.to_string()]
            } else {
                let mut units = [0u16; 2];
                c.encode_utf16(&mut units)
                    .iter()
                    .map(|u| format!("\\u{u:04x}"))
                    .collect()
            }
        })
        .collect();
    forms.push(upper_hex_escapes(&ascii));
    forms.push(ascii);
    forms.push(json);
    sorted(forms.into_iter().map(String::into_bytes).collect())
}

/// `\u00e9` as `\u00E9`: some encoders write upper-case hex.
fn upper_hex_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("\\u") {
        out.push_str(&rest[..i + 2]);
        let hex = rest[i + 2..].get(..4).unwrap_or("");
        out.push_str(&hex.to_ascii_uppercase());
        rest = &rest[i + 2 + hex.len()..];
    }
    out.push_str(rest);
    out
}

/// `%2F` as `%2f`.
fn percent_lower(upper: &str) -> String {
    let mut out = String::with_capacity(upper.len());
    let mut hex_left = 0;
    for c in upper.chars() {
        if c == '%' {
            hex_left = 2;
            out.push(c);
        } else if hex_left > 0 {
            hex_left -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Longest first (a longer form is replaced whole before a shorter one inside it), no repeats,
/// no empty needles.
pub(crate) fn sorted(mut needles: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    needles.retain(|n| !n.is_empty());
    needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    needles.dedup();
    needles
}

/// The base64 token of basic auth: `base64(username ":" password)`.
pub fn basic_token(username: &str, password: &Secret) -> String {
    base64(format!("{username}:{}", password.expose()).as_bytes())
}

/// The base64 of `bytes` wherever they stand in a longer encoded text: for each alignment (the
/// bytes preceded by 0, 1 or 2 others), the characters that depend on these bytes alone, the
/// same whatever their neighbours are. A core shorter than 4 characters is left out (it would
/// redact too much of anything base64, and carries under 3 bytes of the secret).
pub(crate) fn base64_cores(bytes: &[u8]) -> Vec<String> {
    (0..3)
        .filter_map(|before: usize| {
            let mut aligned = vec![0u8; before];
            aligned.extend_from_slice(bytes);
            // The first characters also hold the bits of the bytes before; a last one that is
            // not whole holds bits of the byte after.
            let skip = [0, 2, 3][before];
            let whole = aligned.len() * 8 / 6;
            base64(&aligned)
                .get(skip..whole)
                .filter(|core| core.len() >= 4)
                .map(str::to_string)
        })
        .collect()
}

/// Standard base64 (RFC 4648 §4) with padding.
pub(crate) fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// Percent-encodes `text` (as UTF-8): RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`)
/// stay, every other byte becomes `%XX` with upper-case hex.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    percent_encode_into(text, &mut out);
    out
}

pub(crate) fn percent_encode_into(text: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }
}

//! Lower-case hex text for hashes and fingerprints. `hex::encode` goes through a `char`
//! iterator; an execution writes ~10 such strings, and this table-driven form costs a fraction.

/// `bytes` as lower-case hex digits.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let bytes = bytes.as_ref();
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 15)]);
    }
    // Every byte pushed is an ASCII digit or letter.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_hex_crate() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(super::encode(&bytes), hex::encode(&bytes));
        assert_eq!(super::encode([]), "");
    }
}

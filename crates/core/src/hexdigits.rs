//! Hex text for hashes and fingerprints, both ways. `hex::encode` goes through a `char`
//! iterator; an execution writes ~10 such strings, and the verifier reads two per event, so
//! both directions are table-driven.

/// `bytes` as lower-case hex digits.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    let bytes = bytes.as_ref();
    // Written into place, a byte's two digits from one table entry: pushing checked the
    // capacity at every digit (about 27 instructions a byte; a commit writes hundreds of hash
    // digits), and two lookups with their shifts cost about twice the one.
    let mut out = vec![0u8; bytes.len() * 2];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&PAIRS[usize::from(*b)]);
    }
    // Every byte written is an ASCII digit or letter.
    String::from_utf8(out).unwrap_or_default()
}

/// Each byte's two lower-case hex digits.
const PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut table = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
        i += 1;
    }
    table
};

/// Each byte's value as a hex digit (either case), 255 for bytes that are not hex digits.
const VALUES: [u8; 256] = {
    let mut table = [255u8; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// 64 hex digits (either case) to 32 bytes; `None` for any other text. One validity check at
/// the end instead of a branch per digit.
pub fn decode32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    let mut invalid = 0u8;
    for (slot, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let (hi, lo) = (VALUES[usize::from(pair[0])], VALUES[usize::from(pair[1])]);
        invalid |= hi | lo;
        *slot = (hi << 4) | (lo & 15);
    }
    // A valid digit is at most 15; 255 marks anything else.
    (invalid < 16).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::decode32;

    #[test]
    fn decode32_reads_either_case_and_refuses_anything_else() {
        let bytes: [u8; 32] = std::array::from_fn(|i| (i * 37 + 11) as u8);
        let lower = hex::encode(bytes);
        assert_eq!(decode32(&lower), Some(bytes));
        assert_eq!(decode32(&lower.to_ascii_uppercase()), Some(bytes));
        assert_eq!(decode32(&lower[..62]), None);
        assert_eq!(decode32(&format!("{lower}00")), None);
        for bad in ['g', 'G', ' ', '/', ':', '@', '`'] {
            let mut text = lower.clone();
            text.replace_range(17..18, &bad.to_string());
            assert_eq!(decode32(&text), None, "{text}");
        }
    }

    #[test]
    fn matches_the_hex_crate() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(super::encode(&bytes), hex::encode(&bytes));
        assert_eq!(super::encode([]), "");
    }
}

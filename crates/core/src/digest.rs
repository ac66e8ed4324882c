//! SHA-256, Postern's one: the audit chain's links, record and result digests, upstream tool
//! pins, certificate and token fingerprints. (The console's HMACs keep the hmac crate.)
//!
//! ring's, not sha2's: both use the CPU's SHA extensions where it has them, and where it has
//! not (older servers; valgrind, which counts CI's instructions) ring's assembly takes about
//! 38 % fewer instructions per block than sha2's portable code (docs/performance.md). ring is
//! linked for TLS anyway.

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha256_of(&[bytes])
}

/// SHA-256 of `parts` one after the other (no separators: the caller's format delimits them).
pub fn sha256_of(parts: &[&[u8]]) -> [u8; 32] {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        context.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    #[test]
    fn the_same_hash_as_sha2_for_every_length_around_a_block() {
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let expected: [u8; 32] = Sha256::digest(&bytes).into();
            assert_eq!(super::sha256(&bytes), expected, "length {len}");
            let (a, b) = bytes.split_at(len / 3);
            assert_eq!(
                super::sha256_of(&[a, b]),
                expected,
                "length {len} in two parts"
            );
        }
    }
}

//! The hasher of the verifier's per-execution maps: a multiply-fold keyed from the standard
//! library's random state. SipHash was a tenth of verifying a store (three lookups an event);
//! this keeps a per-process random key, so a crafted store cannot pick colliding ids up front.

use std::hash::{BuildHasher, Hasher, RandomState};

/// Builds [`Fold`] hashers, keyed once per map.
#[derive(Clone)]
pub(crate) struct FoldState {
    seed: u64,
    key: u64,
}

impl Default for FoldState {
    fn default() -> Self {
        let random = RandomState::new();
        FoldState {
            seed: random.hash_one(0x5eed_u64),
            // Odd, so the multiply loses no bit.
            key: random.hash_one(0x006b_6579_u64) | 1,
        }
    }
}

impl BuildHasher for FoldState {
    type Hasher = Fold;
    fn build_hasher(&self) -> Fold {
        Fold {
            h: self.seed,
            key: self.key,
        }
    }
}

pub(crate) struct Fold {
    h: u64,
    key: u64,
}

impl Fold {
    fn mix(&mut self, v: u64) {
        let p = u128::from(self.h ^ v) * u128::from(self.key);
        self.h = (p as u64) ^ ((p >> 64) as u64);
    }
}

impl Hasher for Fold {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        self.mix(u64::from_le_bytes(w) ^ ((bytes.len() as u64) << 56));
    }
    fn write_u8(&mut self, v: u8) {
        self.mix(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.mix(v);
    }
    fn write_u128(&mut self, v: u128) {
        self.mix(v as u64);
        self.mix((v >> 64) as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.mix(v as u64);
    }
    fn finish(&self) -> u64 {
        self.h
    }
}

/// A map keyed with [`FoldState`].
pub(crate) type FoldMap<K, V> = std::collections::HashMap<K, V, FoldState>;

//! Each chain's event hashes by seq. A chain is almost always read as one run 1, 2, 3, …, so
//! that run is kept as a plain vector (a million map inserts were a good part of verifying);
//! whatever falls outside it (gaps, reorders) goes to a map.

use std::collections::HashMap;

#[derive(Default)]
pub(crate) struct SeqHashes {
    /// The hashes of seqs `start`, `start + 1`, … in order.
    start: u64,
    run: Vec<[u8; 32]>,
    /// Every other seq's.
    other: HashMap<u64, [u8; 32]>,
}

impl SeqHashes {
    /// The place of `seq` in the run, if the run holds it.
    fn in_run(&self, seq: u64) -> Option<usize> {
        let i = usize::try_from(seq.checked_sub(self.start)?).ok()?;
        (i < self.run.len()).then_some(i)
    }

    pub(crate) fn contains(&self, seq: u64) -> bool {
        self.get(seq).is_some()
    }

    pub(crate) fn get(&self, seq: u64) -> Option<&[u8; 32]> {
        match self.in_run(seq) {
            Some(i) => self.run.get(i),
            None => self.other.get(&seq),
        }
    }

    pub(crate) fn insert(&mut self, seq: u64, hash: [u8; 32]) {
        if let Some(i) = self.in_run(seq) {
            self.run[i] = hash;
        } else if self.run.is_empty() && self.other.is_empty() {
            self.start = seq;
            self.run.push(hash);
        } else if !self.run.is_empty() && seq.checked_sub(self.start) == Some(self.run.len() as u64)
        {
            // The seq right after the run: one copy of it only, in the run.
            if !self.other.is_empty() {
                self.other.remove(&seq);
            }
            self.run.push(hash);
        } else {
            self.other.insert(seq, hash);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.run.len() + self.other.len()
    }

    /// Every seq held, in no particular order.
    pub(crate) fn seqs(&self) -> impl Iterator<Item = u64> + '_ {
        // Each is a seq that was inserted, so none overflows.
        (0..self.run.len() as u64)
            .map(|i| self.start + i)
            .chain(self.other.keys().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::SeqHashes;
    use std::collections::HashMap;

    /// Agrees with a plain map whatever the order of seqs.
    #[test]
    fn behaves_as_a_map() {
        let orders: [&[u64]; 5] = [
            &[1, 2, 3, 4],
            &[3, 1, 2, 4, 5],
            &[1, 2, 5, 3, 4, 6, 5],
            &[7, 8, 10, 9, 11, 10, 6],
            &[2, 1, 3, 1, 4],
        ];
        for order in orders {
            let (mut s, mut m) = (SeqHashes::default(), HashMap::new());
            for (k, seq) in order.iter().enumerate() {
                let h = [k as u8; 32];
                s.insert(*seq, h);
                m.insert(*seq, h);
            }
            assert_eq!(s.len(), m.len(), "{order:?}");
            for seq in 0..13 {
                assert_eq!(s.get(seq), m.get(&seq), "{order:?} {seq}");
            }
            let mut seqs: Vec<u64> = s.seqs().collect();
            seqs.sort_unstable();
            let mut keys: Vec<u64> = m.keys().copied().collect();
            keys.sort_unstable();
            assert_eq!(seqs, keys, "{order:?}");
        }
    }
}

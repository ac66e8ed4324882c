//! Fuzzing the export verifier by property-based generation (see the core crate's `fuzz.rs`
//! for how to run long and where failing inputs are kept): whatever the file holds, the
//! verifier answers without panicking, and an export with any byte of its events changed is
//! never VALID.

use std::io::Cursor;

use postern_audit::{verify_export_with, ChainRange, ExportHeader, ExportLine, Verifier};
use postern_core::Timestamp;
use proptest::prelude::*;

use super::{key, lifecycle_log};

/// A valid, signed export of the test log, with a checkpoint over its head.
fn export() -> Vec<u8> {
    let k = key();
    let log = lifecycle_log();
    let head = log.last().unwrap();
    let header = ExportHeader {
        format: postern_audit::EXPORT_FORMAT.into(),
        exported_at: Timestamp(1),
        ranges: vec![ChainRange {
            chain: "main".into(),
            from: 1,
            to: head.body.seq,
        }],
        public_key: None,
        heads: Some(vec![postern_audit::ChainHead {
            chain: "main".into(),
            seq: head.body.seq,
            hash: head.hash,
        }]),
        signature: None,
    }
    .signed(&k)
    .unwrap();
    let mut lines = vec![serde_json::to_string(&ExportLine::Header(header)).unwrap()];
    for e in &log {
        lines.push(serde_json::to_string(&ExportLine::Event(e.clone())).unwrap());
    }
    let cp = k
        .checkpoint("main", (head.body.seq, head.hash), Timestamp(2), None)
        .unwrap();
    lines.push(serde_json::to_string(&ExportLine::Checkpoint(cp)).unwrap());
    (lines.join("\n") + "\n").into_bytes()
}

fn verify(bytes: &[u8]) -> Option<bool> {
    let verifier = Verifier::new(key().verifying_key());
    verify_export_with(Cursor::new(bytes), verifier, |_, _| {})
        .ok()
        .map(|r| r.is_valid())
}

#[test]
fn the_unchanged_export_is_valid() {
    assert_eq!(verify(&export()), Some(true));
}

proptest! {
    #[test]
    fn fuzz_the_export_verifier_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = verify(&bytes);
    }

    /// One byte of an event line replaced by another: never VALID (an error, or a break).
    #[test]
    fn fuzz_a_changed_event_byte_is_never_valid(pick in any::<prop::sample::Index>(), by in 1u8..=255) {
        let mut bytes = export();
        let header_end = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        let checkpoint_start = bytes[..bytes.len() - 1].iter().rposition(|b| *b == b'\n').unwrap();
        let at = header_end + pick.index(checkpoint_start - header_end);
        if bytes[at] == b'\n' {
            return Ok(());
        }
        bytes[at] = bytes[at].wrapping_add(by);
        // Only a change to what an event says must be caught: a byte that decodes to the same
        // event (a hex digit's case: the same hash bytes) changes nothing it vouches for.
        let events = |b: &[u8]| -> Option<Vec<ExportLine>> {
            let text = std::str::from_utf8(b).ok()?;
            text.lines().map(|l| postern_audit::read_line(l).ok()).collect()
        };
        let same = events(&bytes).is_some() && events(&bytes) == events(&export());
        if !same {
            prop_assert_ne!(verify(&bytes), Some(true));
        }
    }
}

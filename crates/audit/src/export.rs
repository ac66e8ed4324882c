//! The self-contained JSONL export: a header line, then event and checkpoint lines, one JSON
//! object each, externally tagged (`{"event":{…}}`) so a reader never buffers a line twice.

use serde::{Deserialize, Serialize};

use std::io::BufRead;
use std::sync::Arc;

use postern_core::{EventKind, ExecutionId, Timestamp};
use serde_json::value::RawValue;

pub use crate::chain::ChainHead;
use crate::chain::{event_name, hex32, raw_event_hash, ChainedEvent, Checkpoint, VerifyingKey};
use crate::pruned::PrunedRange;
use crate::verify::{ChainRange, EventMeta, Report, Verifier};

pub const EXPORT_FORMAT: &str = "postern-audit/1";

/// What the export claims to contain: the range requested, per chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportHeader {
    pub format: String,
    pub exported_at: postern_core::Timestamp,
    pub ranges: Vec<ChainRange>,
    /// The public key that signs the checkpoints (informational: verifiers bring their own).
    pub public_key: Option<String>,
    /// Each chain's last event as of the export. Signed with the rest, so the file must end
    /// exactly there: a rewrite after the last checkpoint, a cut or an appended event is a
    /// break. `None` in exports written before heads were named (their signed bytes stay the
    /// same, so their signatures still verify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<Vec<ChainHead>>,
    /// Ed25519 over the JCS bytes of this header without `signature`, hex: the ranges it names
    /// are what the verifier holds the file to, so an edited header must not pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl ExportHeader {
    fn signed_bytes(&self) -> Result<Vec<u8>, crate::AuditError> {
        let unsigned = ExportHeader {
            signature: None,
            ..self.clone()
        };
        Ok(postern_core::canon::canonical_bytes(&unsigned)?)
    }

    /// This header, signed by `key`.
    pub fn signed(mut self, key: &crate::SigningKey) -> Result<ExportHeader, crate::AuditError> {
        self.signature = None;
        self.signature = Some(key.sign_hex(&self.signed_bytes()?));
        Ok(self)
    }

    /// Whether the header carries `key`'s signature over its content.
    pub fn is_signed_by(&self, key: &VerifyingKey) -> bool {
        match (&self.signature, self.signed_bytes()) {
            (Some(sig), Ok(bytes)) => key.verifies_hex(&bytes, sig),
            _ => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExportLine {
    Header(ExportHeader),
    /// Written before the events, so the verifier knows the gaps retention left.
    Pruned(PrunedRange),
    Event(ChainedEvent),
    Checkpoint(Checkpoint),
}

/// Parses one line of an export.
pub fn read_line(line: &str) -> Result<ExportLine, serde_json::Error> {
    serde_json::from_str(line)
}

/// Lines parsed and re-hashed per batch; batches are split across two threads.
const BATCH: usize = 8192;

/// An export line read for verification: borrowed where possible, the detail kept as the
/// raw (canonical) bytes it must hash to.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawLine<'a> {
    Header(ExportHeader),
    Pruned(PrunedRange),
    #[serde(borrow)]
    Event(RawEvent<'a>),
    Checkpoint(Checkpoint),
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow)]
    chain: std::borrow::Cow<'a, str>,
    seq: u64,
    #[serde(borrow)]
    execution_id: std::borrow::Cow<'a, str>,
    n: u32,
    #[serde(with = "event_name")]
    event: EventKind,
    at: Timestamp,
    #[serde(borrow)]
    detail: &'a RawValue,
    #[serde(with = "hex32")]
    prev_hash: [u8; 32],
    #[serde(with = "hex32")]
    hash: [u8; 32],
}

struct OwnedMeta {
    /// Shared with the events before it on the same chain: one allocation per chain switch,
    /// not per event.
    chain: Arc<str>,
    seq: u64,
    execution_id: ExecutionId,
    n: u32,
    event: EventKind,
    at: Timestamp,
    prev_hash: [u8; 32],
    hash: [u8; 32],
}

enum Parsed {
    Header(ExportHeader),
    Pruned(PrunedRange),
    Event(OwnedMeta, bool),
    Checkpoint(Checkpoint),
    Bad(String),
    Blank,
}

/// Parses and re-hashes lines on one thread, reusing its buffers from line to line.
#[derive(Default)]
struct LineParser {
    /// The canonical body being hashed.
    body: Vec<u8>,
    /// The chain of the last event parsed.
    chain: Option<Arc<str>>,
}

impl LineParser {
    fn parse(&mut self, line: &str) -> Parsed {
        if line.trim().is_empty() {
            return Parsed::Blank;
        }
        match serde_json::from_str::<RawLine<'_>>(line) {
            Ok(RawLine::Event(e)) => {
                let Ok(execution_id) = e.execution_id.parse::<ExecutionId>() else {
                    return Parsed::Bad(format!("invalid execution id {:?}", e.execution_id));
                };
                let intact = raw_event_hash(
                    &mut self.body,
                    &e.prev_hash,
                    e.at,
                    &e.chain,
                    e.detail.get().as_bytes(),
                    e.event,
                    execution_id,
                    e.n,
                    e.seq,
                )
                .is_ok_and(|h| h == e.hash);
                let chain = match &self.chain {
                    Some(c) if **c == *e.chain => c.clone(),
                    _ => {
                        let c: Arc<str> = Arc::from(&*e.chain);
                        self.chain = Some(c.clone());
                        c
                    }
                };
                let meta = OwnedMeta {
                    chain,
                    seq: e.seq,
                    execution_id,
                    n: e.n,
                    event: e.event,
                    at: e.at,
                    prev_hash: e.prev_hash,
                    hash: e.hash,
                };
                Parsed::Event(meta, intact)
            }
            Ok(RawLine::Header(h)) => Parsed::Header(h),
            Ok(RawLine::Pruned(r)) => Parsed::Pruned(r),
            Ok(RawLine::Checkpoint(c)) => Parsed::Checkpoint(c),
            Err(e) => Parsed::Bad(e.to_string()),
        }
    }

    fn parse_all(text: &str, lines: &[(usize, usize)]) -> Vec<Parsed> {
        let mut parser = LineParser::default();
        lines
            .iter()
            .map(|&(a, b)| parser.parse(&text[a..b]))
            .collect()
    }
}

/// Reads up to `BATCH` lines into one buffer (one allocation per batch, not per line); returns
/// each line's range, its line break left out.
fn read_batch(
    reader: &mut impl BufRead,
    text: &mut String,
    lines: &mut Vec<(usize, usize)>,
) -> std::io::Result<()> {
    text.clear();
    lines.clear();
    while lines.len() < BATCH {
        let start = text.len();
        if reader.read_line(text)? == 0 {
            break;
        }
        let mut end = text.len();
        if text[start..end].ends_with('\n') {
            end -= 1;
            if text[start..end].ends_with('\r') {
                end -= 1;
            }
        }
        lines.push((start, end));
    }
    Ok(())
}

/// Verifies a JSONL export read from `reader`. Parsing and re-hashing (the costly part) run
/// on two threads a batch at a time; order-dependent checks run in file order.
/// `progress(events_so_far, events_expected)` is called now and then.
pub fn verify_export(
    reader: impl BufRead,
    key: VerifyingKey,
    progress: impl FnMut(u64, Option<u64>),
) -> std::io::Result<Report> {
    verify_export_with(reader, Verifier::new(key), progress)
}

/// [`verify_export`] with a verifier the caller prepared (e.g. with anchors).
pub fn verify_export_with(
    mut reader: impl BufRead,
    mut verifier: Verifier,
    mut progress: impl FnMut(u64, Option<u64>),
) -> std::io::Result<Report> {
    let mut line_no: u64 = 0;
    let mut events = 0u64;
    let mut total = None;
    let mut header = false;
    let mut apply = |parsed: Vec<Parsed>, verifier: &mut Verifier| {
        for p in parsed {
            line_no += 1;
            match p {
                Parsed::Blank => {}
                Parsed::Bad(reason) => verifier.malformed(line_no, reason),
                Parsed::Header(h) => {
                    header = true;
                    let signed = h.is_signed_by(&verifier.key());
                    verifier.header(line_no, signed, h.signature.is_some());
                    // An export is judged as of when it was made, not when it is read.
                    verifier.reference_time(h.exported_at);
                    // Heads count only under a valid signature; an unsigned header is a break.
                    if signed {
                        verifier.signed_heads(h.heads.clone());
                    }
                    if h.format != EXPORT_FORMAT {
                        verifier
                            .malformed(line_no, format!("unknown export format {:?}", h.format));
                    }
                    total = Some(
                        h.ranges
                            .iter()
                            .map(|r| r.to.saturating_add(1).saturating_sub(r.from))
                            .sum(),
                    );
                    for r in h.ranges {
                        verifier.request(r);
                    }
                }
                Parsed::Event(m, intact) => {
                    let meta = EventMeta {
                        chain: &m.chain,
                        seq: m.seq,
                        execution_id: m.execution_id,
                        n: m.n,
                        event: m.event,
                        at: m.at,
                        prev_hash: m.prev_hash,
                        hash: m.hash,
                    };
                    verifier.event_checked(&meta, intact);
                    events += 1;
                }
                Parsed::Checkpoint(c) => verifier.checkpoint(&c),
                Parsed::Pruned(r) => verifier.pruned(r),
            }
        }
        progress(events, total);
    };
    // A pipeline: while two threads parse and re-hash batch k, this one runs the in-order
    // checks of batch k-1. (Reading batch k+1 meanwhile as well measured no faster.)
    let mut previous: Option<Vec<Parsed>> = None;
    let (mut text, mut ranges) = (String::new(), Vec::with_capacity(BATCH));
    loop {
        read_batch(&mut reader, &mut text, &mut ranges)?;
        if ranges.is_empty() {
            break;
        }
        let (first, second) = ranges.split_at(ranges.len() / 2);
        let ready = previous.take();
        let text = &text;
        let (a, b) = std::thread::scope(|s| {
            let one = s.spawn(|| LineParser::parse_all(text, first));
            let two = s.spawn(|| LineParser::parse_all(text, second));
            if let Some(ready) = ready {
                apply(ready, &mut verifier);
            }
            (one.join(), two.join())
        });
        let (mut a, b) = match (a, b) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return Err(std::io::Error::other("a verification thread panicked")),
        };
        a.extend(b);
        previous = Some(a);
    }
    if let Some(ready) = previous.take() {
        apply(ready, &mut verifier);
    }
    if !header {
        // Without it nothing says what range the file should hold: an emptied or head-cut
        // export would otherwise verify as VALID.
        verifier.malformed(
            1,
            format!("no {EXPORT_FORMAT} header line: not a whole export"),
        );
    }
    Ok(verifier.finish())
}

//! Whether a stored detail's text is already its own canonical (RFC 8785) form. A store keeps
//! each detail as the canonical bytes its hash covered, so a verifier that finds them canonical
//! can hash them as stored instead of parsing and re-serialising every event. The check is
//! conservative: it vouches only for forms whose canonical writing is plain (no escapes, no
//! fractions or exponents, ASCII keys); any other text takes the full parse, as before.

use std::ops::Range;

/// The top-level string members a verifier reads from a detail, in this order.
pub(crate) const PICKED: [&str; 6] = [
    "result_ref",
    "result_digest",
    "record_sha256",
    "fingerprint",
    "actor",
    "tool",
];

/// Where each of [`PICKED`] is in the text (a string value's contents), if it is a member of
/// the top-level object with a string value.
pub(crate) type Picked = [Option<Range<u32>>; 6];

/// Nesting deeper than this is left to the full parse.
const MAX_DEPTH: u32 = 32;

/// Integers up to this many digits are exact in every reader (below 2^53).
const MAX_DIGITS: usize = 15;

/// `Some` (with the picked members) when `text` is a JSON value exactly as the canonical writer
/// would write it back; `None` when it is not, or is not a form this check vouches for.
pub(crate) fn canonical_picks(text: &str) -> Option<Picked> {
    let mut s = Scan {
        b: text.as_bytes(),
        i: 0,
        picked: Default::default(),
    };
    s.value(0)?;
    (s.i == s.b.len()).then_some(s.picked)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    picked: Picked,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn value(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.integer(),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// `-?(0|[1-9][0-9]*)`, never `-0`, short enough to be exact.
    fn integer(&mut self) -> Option<()> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let digits = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let d = &self.b[digits..self.i];
        let plain = match d {
            [] => false,
            [b'0'] => digits == start,
            [first, ..] => *first != b'0' && d.len() <= MAX_DIGITS,
        };
        plain.then_some(())
    }

    /// A string needing no escape (the writer escapes only `"`, `\` and controls); the range
    /// of its contents.
    fn string(&mut self) -> Option<Range<usize>> {
        self.i += 1;
        let start = self.i;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' | 0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
        self.i += 1;
        Some(start..self.i - 1)
    }

    fn array(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.i += 1;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.value(depth)?;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Keys ASCII and strictly ascending (so bytewise order is RFC 8785's, and none repeats).
    fn object(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.i += 1;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        let mut last: Option<Range<usize>> = None;
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            let k = &self.b[key.clone()];
            if !k.is_ascii() || last.is_some_and(|l| self.b[l] >= *k) {
                return None;
            }
            if self.peek()? != b':' {
                return None;
            }
            self.i += 1;
            let slot = (depth == 1)
                .then(|| PICKED.iter().position(|p| p.as_bytes() == k))
                .flatten();
            match slot {
                Some(slot) if self.peek()? == b'"' => {
                    let r = self.string()?;
                    self.picked[slot] =
                        Some(u32::try_from(r.start).ok()?..u32::try_from(r.end).ok()?);
                }
                _ => self.value(depth)?,
            }
            last = Some(key);
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn canonical(v: &Value) -> String {
        let mut out = Vec::new();
        postern_core::canon::write_canonical(v, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn vouches_for_a_ledger_detail_and_picks_its_members() {
        let v = json!({"actor": "a", "record_sha256": "ab", "result_size": 30, "run_id": null,
            "nested": {"actor": "inner"}, "list": [1, -2, true, false, "x", {}], "tool": "t"});
        let text = canonical(&v);
        let p = canonical_picks(&text).expect("canonical");
        let get = |i: usize| {
            p[i].clone()
                .map(|r| &text[r.start as usize..r.end as usize])
        };
        assert_eq!(get(4), Some("a"));
        assert_eq!(get(2), Some("ab"));
        assert_eq!(get(5), Some("t"));
        assert_eq!(get(0), None);
    }

    #[test]
    fn refuses_what_it_cannot_vouch_for() {
        for text in [
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a": 1}"#,
            r#"{"a":"\n"}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"é":1}"#,
            "01",
            "-0",
            "1.5",
            "1e3",
            "12345678901234567",
            "[1,]",
            "{}x",
            " {}",
            "tru",
            "",
        ] {
            assert!(canonical_picks(text).is_none(), "{text}");
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            ".{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(".{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// What it vouches for is its own canonical form: parsing and re-writing it changes
        /// nothing, so hashing the stored text is hashing what the full parse would.
        #[test]
        fn vouches_only_for_fixed_points(v in value(), edit in any::<u8>(), at in any::<usize>()) {
            let text = canonical(&v);
            let mut bytes = text.clone().into_bytes();
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = edit;
            }
            for t in [text, String::from_utf8_lossy(&bytes).into_owned()] {
                if canonical_picks(&t).is_some() {
                    let parsed: Value = serde_json::from_str(&t).unwrap();
                    prop_assert_eq!(canonical(&parsed), t);
                }
            }
        }
    }
}

//! Fuzzing by property-based generation (coverage-guided fuzzing needs a nightly toolchain;
//! this one has stable only). Each target holds on every input: no panic, and the stated
//! property. `PROPTEST_CASES` sets how many inputs (256 by default; a long run:
//! `PROPTEST_CASES=200000 cargo test -p postern-core --test core fuzz`). A failing input is
//! shrunk and kept in `proptest-regressions/`, which is committed: it is replayed first by
//! every later run, as a regression test.

use postern_core::canon::{canonical_value_bytes, parse_strict};
use postern_core::config::Config;
use proptest::prelude::*;
use serde_json::Value;

use crate::support::CONFIG;

/// Text shaped like JSON: its tokens in any order, with stray bytes, escapes and numbers at
/// and past the edges the strict reader refuses (duplicate keys, 2^53, exponents).
fn json_like() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("\"a\"".to_string()),
        Just("\"a\":1".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        Just("9007199254740993".to_string()),
        Just("-0".to_string()),
        Just("1e400".to_string()),
        Just("1.5E-7".to_string()),
        Just("\"\\u0000\\ud800\"".to_string()),
        Just("\"\\uD83D\\uDE00\"".to_string()),
        Just(" \t\n".to_string()),
        "[ -~]{0,3}",
        "\\PC{0,2}",
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

/// JSON values within what the strict reader accepts (integers within ±2^53).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53)..(1i64 << 53)).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn fuzz_the_strict_json_reader_never_panics(text in json_like()) {
        let _ = parse_strict(&text);
    }

    #[test]
    fn fuzz_the_strict_json_reader_on_any_text(text in "\\PC{0,200}") {
        let _ = parse_strict(&text);
    }

    /// Whatever is accepted has one canonical form: reading the canonical bytes back gives the
    /// same bytes (the fingerprint's input is stable).
    #[test]
    fn fuzz_canonical_bytes_are_a_fixed_point(value in json_value()) {
        let text = serde_json::to_string(&value).unwrap();
        let parsed = parse_strict(&text).expect("a value within the strict subset parses");
        let once = canonical_value_bytes(&parsed).unwrap();
        let again = canonical_value_bytes(&parse_strict(std::str::from_utf8(&once).unwrap()).unwrap()).unwrap();
        prop_assert_eq!(once, again);
    }

    #[test]
    fn fuzz_the_config_parser_never_panics(text in "\\PC{0,300}") {
        if let Err(e) = Config::parse(&text, "fuzz.toml") {
            prop_assert!(e.line >= 1 && e.file == "fuzz.toml");
        }
    }

    /// The full example config, cut, spliced and corrupted: every error is located.
    #[test]
    fn fuzz_the_config_parser_on_a_mutated_real_config(
        cut in 0usize..4000,
        keep in 0usize..4000,
        insert in "[ -~\n]{0,12}",
    ) {
        let base = CONFIG;
        let at = base.char_indices().map(|(i, _)| i).nth(cut % base.chars().count()).unwrap_or(0);
        let rest = base[at..].char_indices().map(|(i, _)| i).nth(keep % 60).unwrap_or(0);
        let mutated = format!("{}{}{}", &base[..at], insert, &base[at + rest..]);
        if let Err(e) = Config::parse(&mutated, "fuzz.toml") {
            prop_assert!(e.line >= 1 && !e.message.is_empty());
        }
    }
}

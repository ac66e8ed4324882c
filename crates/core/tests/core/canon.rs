//! RFC 8785 golden vectors and the parsing traps.

use postern_core::canon::{canonical_bytes, canonical_value_bytes, parse_strict, CanonError};
use postern_core::record::{Arguments, RecordError};

fn jcs(text: &str) -> String {
    String::from_utf8(canonical_value_bytes(&parse_strict(text).unwrap()).unwrap()).unwrap()
}

#[test]
fn rfc8785_section_3_2_2_example() {
    let input = r#"{
      "numbers": [333333333.33333329, 1E30, 4.50,
                  2e-3, 0.000000000000000000000000001],
      "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
      "literals": [null, true, false]
    }"#;
    // 1E30 is beyond 2^53, which Postern refuses in arguments; the RFC's own vector is checked
    // through the canonicaliser directly.
    let value: serde_json::Value = serde_json::from_str(input).unwrap();
    let out = String::from_utf8(canonical_bytes(&value).unwrap()).unwrap();
    assert_eq!(
        out,
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
    );
}

#[test]
fn rfc8785_section_3_2_3_sorting_by_utf16_code_units() {
    let input = r#"{
      "\u20ac": "Euro Sign",
      "\r": "Carriage Return",
      "\ufb33": "Hebrew Letter Dalet With Dagesh",
      "1": "One",
      "\ud83d\ude00": "Emoji: Grinning Face",
      "\u0080": "Control",
      "\u00f6": "Latin Small Letter O With Diaeresis"
    }"#;
    assert_eq!(
        jcs(input),
        "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
    );
}

#[test]
fn rfc8785_appendix_b_numbers() {
    let vectors: &[(u64, &str)] = &[
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for (bits, expected) in vectors {
        let f = f64::from_bits(*bits);
        let out = String::from_utf8(canonical_bytes(&f).unwrap()).unwrap();
        assert_eq!(&out, expected, "bits {bits:#018x}");
    }
}

#[test]
fn non_finite_numbers_cannot_be_canonicalised() {
    assert!(matches!(
        canonical_bytes(&f64::NAN),
        Err(CanonError::Serialize(_))
    ));
    assert!(matches!(
        canonical_bytes(&f64::INFINITY),
        Err(CanonError::Serialize(_))
    ));
}

#[test]
fn whitespace_and_key_order_do_not_change_bytes() {
    assert_eq!(
        jcs(r#"{ "b" : [1, 2], "a":{"y":true,"x":null} }"#),
        r#"{"a":{"x":null,"y":true},"b":[1,2]}"#
    );
}

#[test]
fn duplicate_keys_are_refused_with_their_path() {
    assert_eq!(
        parse_strict(r#"{"amount": 5, "amount": 500}"#).unwrap_err(),
        CanonError::DuplicateKey {
            path: "/".into(),
            key: "amount".into()
        }
    );
    assert_eq!(
        parse_strict(r#"{"a": [{"k": 1, "k": 1}]}"#).unwrap_err(),
        CanonError::DuplicateKey {
            path: "/a/0".into(),
            key: "k".into()
        }
    );
    assert!(matches!(
        Arguments::parse(r#"{"x":1,"x":2}"#).unwrap_err(),
        RecordError::Canon(CanonError::DuplicateKey { .. })
    ));
}

#[test]
fn integers_beyond_2_pow_53_are_refused() {
    assert!(parse_strict("9007199254740992").is_ok());
    assert!(parse_strict("-9007199254740992").is_ok());
    assert_eq!(
        parse_strict(r#"{"amount": 9007199254740993}"#).unwrap_err(),
        CanonError::NumberOutOfRange {
            path: "/amount".into()
        }
    );
    assert_eq!(
        parse_strict(r#"{"a": [-9007199254740993]}"#).unwrap_err(),
        CanonError::NumberOutOfRange {
            path: "/a/0".into()
        }
    );
    assert_eq!(
        parse_strict(r#"{"big": 18446744073709551616}"#).unwrap_err(),
        CanonError::NumberOutOfRange {
            path: "/big".into()
        }
    );
    assert_eq!(
        parse_strict(r#"{"e": 1e300}"#).unwrap_err(),
        CanonError::NumberOutOfRange { path: "/e".into() }
    );
}

#[test]
fn non_finite_literals_are_refused() {
    assert!(matches!(
        parse_strict(r#"{"x": 1e400}"#).unwrap_err(),
        CanonError::NonFiniteNumber { line: 1, .. }
    ));
    assert!(matches!(
        parse_strict(r#"{"x": -1e999}"#).unwrap_err(),
        CanonError::NonFiniteNumber { .. }
    ));
    assert!(matches!(
        parse_strict(r#"{"x": NaN}"#).unwrap_err(),
        CanonError::Malformed { .. }
    ));
    assert!(matches!(
        parse_strict(r#"{"x": Infinity}"#).unwrap_err(),
        CanonError::Malformed { .. }
    ));
}

#[test]
fn malformed_json_is_located() {
    let err = parse_strict("{\n  \"a\": 1,\n  \"b\": }").unwrap_err();
    assert!(
        matches!(err, CanonError::Malformed { line: 3, .. }),
        "{err:?}"
    );
    assert!(matches!(
        parse_strict("{} trailing").unwrap_err(),
        CanonError::Malformed { .. }
    ));
}

#[test]
fn errors_never_echo_values() {
    let secret = "sk_live_do_not_print_me";
    let text = format!(
        r#"{{"card_token": "{secret}", "card_token": "{secret}", "n": 99999999999999999999}}"#
    );
    let err = parse_strict(&text).unwrap_err();
    assert!(!err.to_string().contains(secret));
    assert!(!format!("{err:?}").contains(secret));
}

/// A string's escapes are found wherever they stand: before, inside and after each 32-byte
/// chunk the check reads at once (the escapes are ECMAScript's, which serde_json writes too).
#[test]
fn every_escape_is_found_at_every_position() {
    for len in [1usize, 31, 32, 33, 64, 65, 100] {
        for at in 0..len {
            for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', '\u{8}'] {
                let mut text: Vec<char> = "é-abcdefghijklmnopqrstuvwxyz0123456789"
                    .chars()
                    .cycle()
                    .take(len)
                    .collect();
                text[at] = special;
                let text: String = text.into_iter().collect();
                let mut out = Vec::new();
                postern_core::canon::write_canonical_str(&text, &mut out);
                let expected = serde_json::to_string(&text).unwrap();
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    expected,
                    "{special:?} at {at} of {len}"
                );
            }
        }
    }
}

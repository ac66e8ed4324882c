//! Characters that change what a person sees instead of being seen: control characters (a
//! newline that forges a line, an ESC that starts a sequence, a C1 CSI), DEL, bidirectional
//! embeddings, overrides, isolates and marks (which reorder what is read: `\u{202e}1234` reads
//! `4321`), and zero-width and other invisible format characters (which hide a difference). One
//! predicate serves every place a person reads a string Postern did not write: the front
//! refuses agent-chosen keys that hold them, the CLI and the console show them escaped.

use std::borrow::Cow;

/// Whether `c` changes what a person sees (a terminal would act on it, a browser would reorder
/// or hide text around it) instead of being shown.
pub fn acts_on_terminal(c: char) -> bool {
    c.is_control() // C0, DEL, C1
        || matches!(
            c,
            '\u{00ad}' // soft hyphen
                | '\u{034f}' // combining grapheme joiner
                | '\u{061c}' // Arabic letter mark
                | '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}' // Hangul fillers
                | '\u{17b4}' | '\u{17b5}' // Khmer inherent vowels
                | '\u{180b}'..='\u{180f}' // Mongolian free variation selectors, vowel separator
                | '\u{200b}'..='\u{200f}' // zero-width space, (non-)joiner, LRM, RLM
                | '\u{2028}' | '\u{2029}' // line and paragraph separators
                | '\u{202a}'..='\u{202e}' // bidi embeddings and overrides
                | '\u{2060}'..='\u{206f}' // word joiner, invisible operators, isolates, deprecated
                | '\u{feff}' // zero-width no-break space (BOM)
                | '\u{fff9}'..='\u{fffb}' // interlinear annotation
                | '\u{1d173}'..='\u{1d17a}' // musical formatting
                | '\u{e0000}'..='\u{e007f}' // tags
        )
}

/// `s` with every character that changes what a person sees written as `\u{…}` and a backslash
/// as `\\` (so an escape cannot be imitated): how the CLI and the console show a string.
pub fn escaped(s: &str) -> Cow<'_, str> {
    let acts = |c: char| c == '\\' || acts_on_terminal(c);
    if !s.chars().any(acts) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if acts(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// JSON text (as `serde_json` writes it, compact or pretty) with every such character inside
/// its strings written as a JSON escape (`\u202e`; a pair of surrogates above U+FFFF): still
/// the same JSON, now readable as it is. `serde_json` escapes C0 itself but not DEL, C1 or
/// format characters; a raw newline in its output is the pretty printer's own.
pub fn escaped_json(json: &str) -> Cow<'_, str> {
    let acts = |c: char| c != '\n' && acts_on_terminal(c);
    if !json.chars().any(acts) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if acts(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{acts_on_terminal, escaped, escaped_json};

    #[test]
    fn every_class_that_changes_what_is_seen_is_caught() {
        for c in [
            '\n',
            '\u{1b}',
            '\u{7f}',
            '\u{85}',
            '\u{9b}',
            '\u{200b}',
            '\u{200d}',
            '\u{200e}',
            '\u{202a}',
            '\u{202e}',
            '\u{2066}',
            '\u{2069}',
            '\u{2060}',
            '\u{2028}',
            '\u{feff}',
            '\u{061c}',
            '\u{00ad}',
            '\u{e0041}',
        ] {
            assert!(acts_on_terminal(c), "U+{:04X}", c as u32);
        }
        for c in ['a', ' ', 'é', '€', '中', '\u{fe0f}', '😀'] {
            assert!(!acts_on_terminal(c), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn json_stays_json_with_its_hidden_characters_escaped() {
        let v = serde_json::json!({"to": "\u{202e}1234-5678-90\u{202c}", "n": "a\u{9b}b\u{e0041}"});
        let text = serde_json::to_string_pretty(&v).unwrap();
        let shown = escaped_json(&text);
        assert!(shown.contains("\\u202e1234-5678-90\\u202c"), "{shown}");
        assert!(shown.contains("a\\u009bb\\udb40\\udc41"), "{shown}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&shown).unwrap(),
            v
        );
        assert_eq!(escaped("a\u{202e}b\\"), "a\\u{202e}b\\\\");
    }
}

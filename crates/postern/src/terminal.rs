//! The one place the CLI renders text it did not write for a terminal. Agents choose many of
//! the strings an operator reads (run ids, client names, operation keys, intent scopes), and a
//! target chooses its answers: a newline there could forge a line, an ESC hide one, a bidi
//! override reorder one. Every such string is printed through [`shown`] (JSON output stays
//! JSON: serde escapes control characters itself).

use std::borrow::Cow;

use serde_json::Value;

/// A string from the gateway, as the terminal may show it: agents choose many of them (run
/// ids, client names, keys), so control characters (a newline that forges a line, an ESC that
/// hides one) and invisible bidirectional formatting are shown escaped, never obeyed.
pub(crate) fn text(v: &Value) -> Cow<'_, str> {
    shown(v.as_str().unwrap_or("?"))
}

/// `s` with every character a terminal would act on written as `\u{…}` (a backslash as `\\`).
pub(crate) fn shown(s: &str) -> Cow<'_, str> {
    let acts = |c: char| c == '\\' || postern_core::terminal_text::acts_on_terminal(c);
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

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn what_a_terminal_would_obey_is_shown_escaped() {
        let forged = "r1\narguments    {\"amount\":1}\u{1b}[8m";
        let out = shown(forged);
        assert!(!out.contains('\n') && !out.contains('\u{1b}'), "{out}");
        assert_eq!(out, "r1\\u{a}arguments    {\"amount\":1}\\u{1b}[8m");
        assert_eq!(shown("plain-run_1 é"), "plain-run_1 é");
        assert_eq!(shown("a\u{202e}b"), "a\\u{202e}b");
        // A backslash is escaped too, so an escape cannot be imitated.
        assert_eq!(shown("a\\u{a}"), "a\\\\u{a}");
    }
}

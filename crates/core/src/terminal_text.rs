//! Characters a terminal obeys rather than shows: control characters (a newline that forges a
//! line, an ESC that starts a sequence) and invisible formatting (zero-width characters and
//! bidirectional overrides that reorder what is read). The front refuses agent-chosen keys that
//! hold them; the CLI escapes them in everything else it prints.

/// Whether a terminal would act on `c` instead of showing it.
pub fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

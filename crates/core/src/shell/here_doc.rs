//! Here-documents: the `<<WORD` and `<<-WORD` operators with their delimiter, and the bodies
//! read at the end of the line, where no placeholder may stand.

use super::{Context, Lexer, TemplateError};

/// A here-document whose body starts at the end of the current line.
pub(super) struct HereDoc {
    delimiter: String,
    strip_tabs: bool,
}

impl Lexer {
    /// `<<WORD` or `<<-WORD`; its body is read at the end of the line. `<<<` is a here-string,
    /// one plain word.
    pub(super) fn here_operator(&mut self) -> Result<(), TemplateError> {
        if self.peek(2) == Some('<') {
            self.i += 3;
            self.word_start = true;
            return Ok(());
        }
        self.i += 2;
        let strip_tabs = self.peek(0) == Some('-');
        self.i += usize::from(strip_tabs);
        while matches!(self.peek(0), Some(' ' | '\t')) {
            self.i += 1;
        }
        let delimiter = self.here_delimiter()?;
        self.pending.push(HereDoc {
            delimiter,
            strip_tabs,
        });
        self.word_start = false;
        Ok(())
    }

    /// The delimiter word, its quotes removed (quoting it only turns off expansions).
    fn here_delimiter(&mut self) -> Result<String, TemplateError> {
        let (mut word, mut quote, mut escaped) = (String::new(), None, false);
        while let Some(c) = self.peek(0) {
            if c == '{' {
                self.placeholder(Some(Context::HereDelimiter))?; // always refused
            }
            match (quote, c) {
                _ if escaped => {
                    word.push(c);
                    escaped = false;
                }
                (None, ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>') => break,
                (Some(q), _) if c == q => quote = None,
                (None, '\'' | '"') => quote = Some(c),
                (None | Some('"'), '\\') => escaped = true,
                _ => word.push(c),
            }
            self.i += 1;
        }
        Ok(word)
    }

    /// After a newline: the bodies of the line's here-documents, in order, each up to the line
    /// equal to its delimiter (leading tabs removed for `<<-`).
    pub(super) fn here_bodies(&mut self) -> Result<(), TemplateError> {
        for doc in std::mem::take(&mut self.pending) {
            while self.i < self.s.len() {
                let rest = &self.s[self.i..];
                let len = rest.iter().position(|&c| c == '\n').unwrap_or(rest.len());
                let line: String = rest[..len].iter().collect();
                let next = (self.i + len + 1).min(self.s.len());
                if line.trim_start_matches(|c| doc.strip_tabs && c == '\t') == doc.delimiter {
                    self.i = next;
                    break;
                }
                if let Some(at) = rest[..len].iter().position(|&c| c == '{') {
                    self.i += at;
                    return self.placeholder(Some(Context::HereDocument));
                }
                self.i = next;
            }
        }
        Ok(())
    }
}

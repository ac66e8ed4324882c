//! Where the placeholders of an SSH command template stand, read as a POSIX shell reads it.
//!
//! The SSH channel replaces each `{name}` with the argument in single quotes. That makes the
//! value one word of data only where the shell reads those quotes as quotes: in plain code.
//! Inside `"…"` they are literal and a `$(…)` in the value runs; in a comment a newline in the
//! value ends the comment. So [`check_command`] refuses, when the configuration is loaded, a
//! placeholder that stands anywhere else.
//!
//! Placeholders are found as the renderer finds them: every `{` opens one, up to the next `}`,
//! whatever the shell context (a template has no literal braces). The lexer never reads inside
//! a placeholder: the renderer replaces it whole.

use std::fmt;

/// Where a placeholder stands that the gateway's quoting would not keep one word of data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    SingleQuotes,
    DoubleQuotes,
    Backticks,
    CommandSubstitution,
    Arithmetic,
    /// Right after `$`: `${…}`, rendered `$'…'`, which bash reads with backslash escapes.
    ParameterExpansion,
    /// Right after `\`, which would make the opening quote literal.
    Backslash,
    HereDocument,
    HereDelimiter,
    Comment,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Context::SingleQuotes => "inside single quotes '…'",
            Context::DoubleQuotes => "inside double quotes \"…\"",
            Context::Backticks => "inside backticks `…`",
            Context::CommandSubstitution => "inside a command substitution $(…)",
            Context::Arithmetic => "inside an arithmetic expansion $((…))",
            Context::ParameterExpansion => "inside a parameter expansion ${…}",
            Context::Backslash => "right after a backslash",
            Context::HereDocument => "inside a here-document body",
            Context::HereDelimiter => "as a here-document delimiter",
            Context::Comment => "inside a comment",
        })
    }
}

/// Why a command template was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `line` and `column` are 1-based, in characters.
    #[error("placeholder {placeholder} at line {line}, column {column} stands {context}: the gateway quotes every argument itself, which keeps it one word of data only outside quotes, substitutions, here-documents and comments (write `echo {{msg}}`, not `echo \"{{msg}}\"`)")]
    Inside {
        placeholder: String,
        line: usize,
        column: usize,
        context: Context,
    },
    #[error("the {{ at line {line}, column {column} opens a placeholder that no }} closes")]
    Unclosed { line: usize, column: usize },
}

/// Refuses a template with a placeholder anywhere but in plain shell code.
pub fn check_command(template: &str) -> Result<(), TemplateError> {
    let mut lexer = Lexer {
        s: template.chars().collect(),
        i: 0,
        stack: Vec::new(),
        word_start: true,
        pending: Vec::new(),
    };
    while lexer.i < lexer.s.len() {
        lexer.step()?;
    }
    // An unterminated quote or substitution is left to the shell to report: everything after
    // its opening was read as inside it, so no placeholder there got through.
    Ok(())
}

/// What the lexer is inside of, and (for `$(…)` and `$((…))`) how many parentheses are open
/// inside it.
type Frame = (Context, usize);

/// A here-document whose body starts at the end of the current line.
struct HereDoc {
    delimiter: String,
    strip_tabs: bool,
}

struct Lexer {
    s: Vec<char>,
    i: usize,
    /// Empty in plain code at the top.
    stack: Vec<Frame>,
    /// The next character starts a word (where `#` starts a comment).
    word_start: bool,
    pending: Vec<HereDoc>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.s.get(self.i + ahead).copied()
    }

    fn context(&self) -> Option<Context> {
        self.stack.last().map(|f| f.0)
    }

    fn enter(&mut self, context: Context, skip: usize) {
        self.stack.push((context, 0));
        self.i += skip;
    }

    /// The placeholder whose `{` is at `self.i`: skipped whole in plain code (`context` none),
    /// refused anywhere else.
    fn placeholder(&mut self, context: Option<Context>) -> Result<(), TemplateError> {
        let before = &self.s[..self.i];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let column = self.i - before.iter().rposition(|&c| c == '\n').map_or(0, |p| p + 1) + 1;
        let Some(len) = self.s[self.i..].iter().position(|&c| c == '}') else {
            return Err(TemplateError::Unclosed { line, column });
        };
        let Some(context) = context else {
            self.i += len + 1;
            self.word_start = false;
            return Ok(());
        };
        let placeholder = self.s[self.i..=self.i + len].iter().collect();
        Err(TemplateError::Inside {
            placeholder,
            line,
            column,
            context,
        })
    }

    fn step(&mut self) -> Result<(), TemplateError> {
        let c = self.s[self.i];
        let context = self.context();
        match (context, c) {
            (_, '{') => self.placeholder(context),
            // Nothing is special inside single quotes but the closing one.
            (Some(Context::SingleQuotes), _) => {
                if c == '\'' {
                    self.stack.pop();
                }
                self.i += 1;
                Ok(())
            }
            (Some(Context::DoubleQuotes | Context::Backticks), _) => self.quoted(c),
            _ => self.code(c),
        }
    }

    /// Inside `"…"` or `` `…` ``. A backtick ends at the first unescaped backtick, quotes or
    /// not, as bash and dash read it (POSIX leaves a quoted one undefined).
    fn quoted(&mut self, c: char) -> Result<(), TemplateError> {
        let double = self.context() == Some(Context::DoubleQuotes);
        match c {
            '\\' => return self.escape(),
            '"' if double => drop(self.stack.pop()),
            '`' if !double => drop(self.stack.pop()),
            '$' if double => return self.dollar(),
            '`' => self.enter(Context::Backticks, 0),
            _ => {}
        }
        self.i += 1;
        Ok(())
    }

    /// Plain code: at the top, inside `$(…)` or `$((…))` (no comments nor here-documents in
    /// arithmetic, where `#` is a base and `<<` a shift).
    fn code(&mut self, c: char) -> Result<(), TemplateError> {
        let arith = self.context() == Some(Context::Arithmetic);
        match c {
            '\'' => self.enter(Context::SingleQuotes, 1),
            '"' => self.enter(Context::DoubleQuotes, 1),
            '`' => self.enter(Context::Backticks, 1),
            '\\' => return self.escape(),
            '$' => return self.dollar(),
            '#' if self.word_start && !arith => return self.comment(),
            '<' if !arith && self.peek(1) == Some('<') => return self.here_operator(),
            '\n' if !arith => {
                self.i += 1;
                self.word_start = true;
                return self.here_bodies();
            }
            '(' | ')' => {
                self.paren(c);
                return Ok(());
            }
            _ => self.i += 1,
        }
        self.word_start = matches!(c, ' ' | '\t' | ';' | '&' | '|' | '<' | '>');
        Ok(())
    }

    /// `\` makes the next character literal, but a `{` after it still opens a placeholder
    /// (the renderer knows no escapes), whose opening quote the backslash would make literal.
    fn escape(&mut self) -> Result<(), TemplateError> {
        self.i += 1;
        match self.peek(0) {
            Some('{') => return self.placeholder(self.context().or(Some(Context::Backslash))),
            // A line continuation joins the lines: the word goes on as it was.
            Some('\n') => {}
            Some(_) => self.word_start = false,
            None => return Ok(()),
        }
        self.i += 1;
        Ok(())
    }

    /// `$(` and `$((` open substitutions; `${` is a placeholder right after `$`.
    fn dollar(&mut self) -> Result<(), TemplateError> {
        self.word_start = false;
        match (self.peek(1), self.peek(2)) {
            (Some('('), Some('(')) => self.enter(Context::Arithmetic, 3),
            (Some('('), _) => {
                self.enter(Context::CommandSubstitution, 2);
                self.word_start = true;
            }
            (Some('{'), _) => {
                self.i += 1;
                return self.placeholder(self.context().or(Some(Context::ParameterExpansion)));
            }
            _ => self.i += 1,
        }
        Ok(())
    }

    /// Parentheses nest inside `$(…)` and `$((…))`; the `)` at depth 0 closes the first, `))`
    /// the second. A `case` pattern's lone `)` closes a `$(…)` early: what follows until the
    /// real `)` is then taken as plain code, where the quoting works as it does at the top.
    fn paren(&mut self, c: char) {
        use Context::{Arithmetic, CommandSubstitution};
        self.i += 1;
        self.word_start = true;
        let Some(frame) = self.stack.last_mut() else {
            return; // a subshell at the top: nothing to track
        };
        match (*frame, c) {
            ((CommandSubstitution | Arithmetic, d), '(') => frame.1 = d + 1,
            ((CommandSubstitution | Arithmetic, d), ')') if d > 0 => frame.1 = d - 1,
            ((CommandSubstitution, _), ')') => drop(self.stack.pop()),
            ((Arithmetic, _), ')') if self.s.get(self.i) == Some(&')') => {
                self.stack.pop();
                self.i += 1;
            }
            // `$((a) )` is a subshell inside `$(…)`, as bash reads it.
            ((Arithmetic, _), ')') => frame.0 = CommandSubstitution,
            _ => {}
        }
    }

    /// `#` at a word's start comments out the rest of the line.
    fn comment(&mut self) -> Result<(), TemplateError> {
        while let Some(c) = self.peek(0) {
            match c {
                '\n' => break,
                '{' => return self.placeholder(Some(Context::Comment)),
                _ => self.i += 1,
            }
        }
        Ok(())
    }

    /// `<<WORD` or `<<-WORD`; its body is read at the end of the line. `<<<` is a here-string,
    /// one plain word.
    fn here_operator(&mut self) -> Result<(), TemplateError> {
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
    fn here_bodies(&mut self) -> Result<(), TemplateError> {
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

#[cfg(test)]
mod tests;

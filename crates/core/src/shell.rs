//! Where the placeholders of an SSH command template stand, read as a POSIX shell reads it.
//!
//! The SSH channel replaces each `{name}` with the argument in single quotes. That makes the
//! value one word of data only where the shell reads those quotes as quotes: in plain code.
//! Inside `"…"` they are literal and a `$(…)` in the value runs; in a comment a newline in the
//! value ends the comment. So [`check_command`] refuses, when the configuration is loaded, a
//! placeholder that stands anywhere else.
//!
//! Quoting keeps a value data only where nothing reads it again. Bash evaluates arithmetic
//! (`(( {n} ))`, `[[ {n} -eq 1 ]]`, an array subscript `a[{n}]`, `let`, `declare -i`) by
//! expanding what it reads, so `a[$(cmd)]` runs `cmd`; `eval`, `sh -c`, `ssh` and the others
//! of [`reread`] read their arguments again as code. [`check_command_typed`] refuses a
//! placeholder there unless its schema allows only an integer, a boolean or an enum.
//!
//! Placeholders are found as the renderer finds them: every `{` opens one, up to the next `}`,
//! whatever the shell context (a template has no literal braces). The lexer never reads inside
//! a placeholder: the renderer replaces it whole.

use std::fmt;

use here_doc::HereDoc;

mod here_doc;
mod nesting;
mod reread;

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
    /// `$[…]`, bash's old arithmetic expansion.
    BracketArithmetic,
    /// `((…))` and `for ((…))`: bash evaluates the words inside as arithmetic.
    ArithmeticCommand,
    /// `a[…]` in a word: an indexed array's subscript is arithmetic.
    Subscript,
    /// An argument of a command that reads it again as code or arithmetic (named).
    Reread(&'static str),
}

impl Context {
    /// Whether a value the schema keeps to an integer, a boolean or an enum may stand here:
    /// the contexts where it is read again, not those where the quoting itself breaks.
    fn typed_may_stand(self) -> bool {
        matches!(
            self,
            Context::ArithmeticCommand | Context::Subscript | Context::Reread(_)
        )
    }
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
            Context::BracketArithmetic => "inside an arithmetic expansion $[…]",
            Context::ArithmeticCommand => "inside an arithmetic command ((…))",
            Context::Subscript => "inside an array subscript […]",
            Context::Reread("[[") => {
                return f.write_str("inside [[ … ]], whose -eq, -lt … and subscripts are arithmetic")
            }
            Context::Reread(command) => {
                return write!(f, "in a command that runs {command}, which reads its arguments again as code or arithmetic")
            }
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
    /// Where bash reads the value again (arithmetic, `eval`, `sh -c` …) and the placeholder's
    /// schema allows more than an integer, a boolean or an enum.
    #[error("placeholder {placeholder} at line {line}, column {column} stands {context}: there the value is read again as code (`a[$(cmd)]` runs cmd in arithmetic), which no quoting prevents; give it an input_schema of type integer or boolean or an enum, or take it out of that command")]
    Reread {
        placeholder: String,
        line: usize,
        column: usize,
        context: Context,
    },
    #[error("the {{ at line {line}, column {column} opens a placeholder that no }} closes")]
    Unclosed { line: usize, column: usize },
}

/// Refuses a template with a placeholder anywhere but in plain shell code that nothing reads
/// again ([`check_command_typed`] with no typed placeholder).
pub fn check_command(template: &str) -> Result<(), TemplateError> {
    check_command_typed(template, &[])
}

/// Refuses a template with a placeholder anywhere but in plain shell code; where bash reads
/// the value again (arithmetic, a command of [`reread`]) only the placeholders named in
/// `typed` (whose schema allows only an integer, a boolean or an enum) may stand.
pub fn check_command_typed(template: &str, typed: &[&str]) -> Result<(), TemplateError> {
    let mut lexer = Lexer {
        s: template.chars().collect(),
        i: 0,
        stack: Vec::new(),
        word_start: true,
        pending: Vec::new(),
        typed: typed.iter().map(|t| t.to_string()).collect(),
        command: Command::default(),
    };
    while lexer.i < lexer.s.len() {
        lexer.step()?;
    }
    // An unterminated quote or substitution is left to the shell to report: everything after
    // its opening was read as inside it, so no placeholder there got through.
    lexer.end_command()
}

/// A placeholder found in plain code at the top, judged when its simple command ends.
struct Held {
    placeholder: String,
    line: usize,
    column: usize,
    /// It stands after a `=` in its word (a value, not a name).
    value: bool,
}

/// The simple command being read at the top: its words (quotes removed, what quotes hold
/// left out) and its placeholders.
#[derive(Default)]
struct Command {
    words: Vec<String>,
    word: String,
    /// Inside `[…]` of a word that began before the `[` (an array subscript).
    subscript: bool,
    held: Vec<Held>,
}

/// What the lexer is inside of, and (for `$(…)` and `$((…))`) how many parentheses are open
/// inside it.
type Frame = (Context, usize);

struct Lexer {
    s: Vec<char>,
    i: usize,
    /// Empty in plain code at the top.
    stack: Vec<Frame>,
    /// The next character starts a word (where `#` starts a comment).
    word_start: bool,
    pending: Vec<HereDoc>,
    /// Placeholders whose schema allows only an integer, a boolean or an enum.
    typed: Vec<String>,
    command: Command,
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
        let placeholder: String = self.s[self.i..=self.i + len].iter().collect();
        let context = match context {
            None if self.command.subscript => Some(Context::Subscript),
            other => other,
        };
        let held = Held {
            placeholder,
            line,
            column,
            value: self.command.word.contains('='),
        };
        match context {
            None => {
                self.command.held.push(held);
                self.command.word.push('\0');
            }
            Some(c) if c.typed_may_stand() => self.typed(&held, c)?,
            Some(context) => {
                return Err(TemplateError::Inside {
                    placeholder: held.placeholder,
                    line,
                    column,
                    context,
                })
            }
        }
        self.i += len + 1;
        self.word_start = false;
        Ok(())
    }

    /// A placeholder where its value is read again: refused unless it is typed.
    fn typed(&self, held: &Held, context: Context) -> Result<(), TemplateError> {
        let name = held
            .placeholder
            .trim_start_matches('{')
            .trim_end_matches('}');
        if self.typed.iter().any(|t| t == name) {
            return Ok(());
        }
        Err(TemplateError::Reread {
            placeholder: held.placeholder.clone(),
            line: held.line,
            column: held.column,
            context,
        })
    }

    /// The current word at the top ends (a blank, a redirection).
    fn end_word(&mut self) {
        let c = &mut self.command;
        if !c.word.is_empty() {
            c.words.push(std::mem::take(&mut c.word));
        }
        c.subscript = false;
    }

    /// The simple command at the top ends: its placeholders are judged by its words.
    fn end_command(&mut self) -> Result<(), TemplateError> {
        self.end_word();
        let command = std::mem::take(&mut self.command);
        for held in &command.held {
            if let Some(by) = reread::rereading(&command.words, held.value) {
                self.typed(held, Context::Reread(by))?;
            }
        }
        Ok(())
    }

    /// A character of plain code at the top: words, subscripts and command ends.
    fn top(&mut self, c: char) -> Result<(), TemplateError> {
        let cmd = &mut self.command;
        match c {
            ' ' | '\t' | '<' | '>' => self.end_word(),
            ';' | '&' | '|' | '\n' | '(' | ')' => self.end_command()?,
            '[' if !cmd.word.is_empty() && !cmd.word.chars().all(|w| w == '[') => {
                cmd.subscript = true;
                cmd.word.push(c);
            }
            ']' => {
                cmd.subscript = false;
                cmd.word.push(c);
            }
            '\'' | '"' | '`' | '\\' => {}
            _ => cmd.word.push(c),
        }
        Ok(())
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
        use Context::{Arithmetic, ArithmeticCommand, BracketArithmetic};
        let context = self.context();
        let arith = matches!(
            context,
            Some(Arithmetic | ArithmeticCommand | BracketArithmetic)
        );
        if context == Some(BracketArithmetic) && matches!(c, '[' | ']') {
            self.bracket(c);
            return Ok(());
        }
        if context.is_none() {
            // `((…))` and `for ((…))`, not a subshell in a subshell.
            if c == '(' && self.peek(1) == Some('(') && self.word_start {
                self.end_command()?;
                self.enter(ArithmeticCommand, 2);
                return Ok(());
            }
            self.top(c)?;
        }
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
            (Some('['), _) => self.enter(Context::BracketArithmetic, 2),
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
}

#[cfg(test)]
mod tests;

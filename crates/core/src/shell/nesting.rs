//! How parentheses and brackets nest inside substitutions and arithmetic, and which closing
//! one ends them.

use super::{Context, Lexer};

impl Lexer {
    /// Parentheses nest inside `$(…)` and `$((…))`; the `)` at depth 0 closes the first, `))`
    /// the second. A `case` pattern's lone `)` closes a `$(…)` early: what follows until the
    /// real `)` is then taken as plain code, where the quoting works as it does at the top.
    pub(super) fn paren(&mut self, c: char) {
        use Context::{Arithmetic, ArithmeticCommand, CommandSubstitution};
        self.i += 1;
        self.word_start = true;
        let Some(frame) = self.stack.last_mut() else {
            return; // a subshell at the top: nothing to track
        };
        match (*frame, c) {
            ((CommandSubstitution | Arithmetic | ArithmeticCommand, d), '(') => frame.1 = d + 1,
            ((CommandSubstitution | Arithmetic | ArithmeticCommand, d), ')') if d > 0 => {
                frame.1 = d - 1;
            }
            ((CommandSubstitution, _), ')') => drop(self.stack.pop()),
            ((Arithmetic | ArithmeticCommand, _), ')') if self.s.get(self.i) == Some(&')') => {
                self.stack.pop();
                self.i += 1;
            }
            // `$((a) )` is a subshell inside `$(…)`, as bash reads it.
            ((Arithmetic, _), ')') => frame.0 = CommandSubstitution,
            // `((a) )` at the top was two subshells after all.
            ((ArithmeticCommand, _), ')') => drop(self.stack.pop()),
            _ => {}
        }
    }

    /// Brackets nest inside `$[…]`; the `]` at depth 0 closes it.
    pub(super) fn bracket(&mut self, c: char) {
        self.i += 1;
        if let Some(frame) = self.stack.last_mut() {
            match (frame.1, c) {
                (d, '[') => frame.1 = d + 1,
                (0, _) => drop(self.stack.pop()),
                (d, _) => frame.1 = d - 1,
            }
        }
    }
}

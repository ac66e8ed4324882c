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

/// `s` with every character that changes what a person sees written as `\u{…}` (a backslash as
/// `\\`): the console shows strings the same way (`postern_core::terminal_text`).
pub(crate) fn shown(s: &str) -> Cow<'_, str> {
    postern_core::terminal_text::escaped(s)
}

/// Rows of cells as aligned lines under `header`: each column as wide as its widest cell, a
/// cell wider than its column's cap (`caps[i]`, 0 for none) cut to it and ending in '…', so
/// one long name (a tool's, an actor's) never pushes the columns after it out of line.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>], caps: &[usize]) -> Vec<String> {
    let cut = |cell: &str, i: usize| -> String {
        match caps.get(i).copied().unwrap_or(0) {
            cap if cap > 0 && cell.chars().count() > cap => {
                let kept: String = cell.chars().take(cap - 1).collect();
                format!("{kept}…")
            }
            _ => cell.to_string(),
        }
    };
    let rows: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(rows.iter().cloned())
        .map(|r: Vec<String>| r.iter().enumerate().map(|(i, c)| cut(c, i)).collect())
        .collect();
    let mut widths = vec![0; header.len()];
    for row in &rows {
        for (i, cell) in row.iter().enumerate().take(widths.len()) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, &w)| format!("{cell:<w$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{shown, table};

    #[test]
    fn a_table_aligns_its_columns_and_cuts_a_long_name() {
        let long = "everything_trigger-elicitation-request-async-and-more".to_string();
        let rows = vec![
            vec!["exe_1".into(), long, "delivered(applied)".into()],
            vec![
                "exe_2".into(),
                "memory_read_graph".into(),
                "rejected".into(),
            ],
        ];
        let lines = table(&["EXECUTION", "TOOL", "STATE"], &rows, &[0, 24, 0]);
        assert_eq!(lines[0], "EXECUTION  TOOL                      STATE");
        assert_eq!(
            lines[1],
            "exe_1      everything_trigger-elic…  delivered(applied)"
        );
        assert_eq!(lines[2], "exe_2      memory_read_graph         rejected");
    }

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

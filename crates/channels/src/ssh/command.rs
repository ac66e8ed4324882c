//! The command template, rendered: every `{name}` replaced by the argument's value quoted for a
//! POSIX shell, so that an argument is always one word of data — never a second command, a
//! redirect, a substitution or a glob.

use serde_json::{Map, Value};

/// Quotes `word` for a POSIX shell: inside single quotes nothing is special, and a single
/// quote is written as `'\''` (end the quote, an escaped quote, start again).
pub fn quote(word: &str) -> String {
    let mut quoted = String::with_capacity(word.len() + 2);
    quoted.push('\'');
    for c in word.chars() {
        if c == '\'' {
            quoted.push_str("'\\''");
        } else {
            quoted.push(c);
        }
    }
    quoted.push('\'');
    quoted
}

/// `template` with each `{name}` replaced by the quoted argument, or its contract default
/// when the call leaves it out (`shown` decides what a secret argument becomes: its value for
/// the host, `***` for the record). Refuses an argument that is missing, not a string, number
/// or boolean, or holds a NUL (no shell word can).
pub fn render(
    template: &str,
    arguments: &Map<String, Value>,
    defaults: &Map<String, Value>,
    shown: &dyn Fn(&str, String) -> String,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let len = rest[start..]
            .find('}')
            .ok_or_else(|| "the command has an unbalanced {placeholder}".to_string())?;
        let name = &rest[start + 1..start + len];
        let given = arguments.get(name).filter(|v| !v.is_null());
        let value = match given.or_else(|| defaults.get(name)) {
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
            Some(Value::Null) | None => {
                return Err(format!(
                    "argument {name:?} is needed by the command and missing"
                ))
            }
            Some(_) => {
                return Err(format!(
                    "argument {name:?} must be a string, number or boolean to be put in a command"
                ))
            }
        };
        if value.contains('\0') {
            return Err(format!(
                "argument {name:?} holds a NUL byte, which no command can carry"
            ));
        }
        out.push_str(&quote(&shown(name, value)));
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

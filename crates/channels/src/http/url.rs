//! URL templates: `{name}` becomes the percent-encoded argument `name`, `{execution_id}` the
//! execution id.

use serde_json::{Map, Value};

use crate::ChannelError;

/// The placeholder that is always the execution id, whatever the arguments hold.
pub const EXECUTION_ID_PLACEHOLDER: &str = "execution_id";

/// Renders a URL template. `{name}` is replaced by the argument `name`, percent-encoded with
/// everything outside RFC 3986's unreserved set escaped (so a `/` or `?` in an argument can
/// never change the path or the query): strings as they are, numbers and booleans as their
/// JSON text. `{execution_id}` is replaced by `execution_id` (also encoded). Text outside
/// braces is kept as written. A missing argument, a null, object or array argument, an empty
/// `{}` or unbalanced braces are errors that name the placeholder, never the value.
pub fn render_url(
    template: &str,
    arguments: &Map<String, Value>,
    execution_id: &str,
) -> Result<String, ChannelError> {
    let bad = |reason: String| ChannelError::Template {
        template: template.to_string(),
        reason,
    };
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err(bad(format!(
                "unbalanced '}}' at byte {}",
                template.len() - rest.len() + open
            )));
        }
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after
            .find(['{', '}'])
            .filter(|&i| after.as_bytes()[i] == b'}');
        let Some(close) = close else {
            return Err(bad(format!(
                "unbalanced '{{' at byte {}",
                template.len() - rest.len() + open
            )));
        };
        let name = &after[..close];
        if name.is_empty() {
            return Err(bad("empty placeholder {}".to_string()));
        }
        if name == EXECUTION_ID_PLACEHOLDER {
            percent_encode_into(execution_id, &mut out);
        } else {
            let text = match arguments.get(name) {
                None => {
                    return Err(ChannelError::MissingArgument {
                        placeholder: name.to_string(),
                    })
                }
                Some(Value::String(s)) => s.clone(),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
                Some(other) => {
                    return Err(ChannelError::UnrenderableArgument {
                        placeholder: name.to_string(),
                        kind: json_kind(other),
                    })
                }
            };
            percent_encode_into(&text, &mut out);
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Percent-encodes `text` (as UTF-8): RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`)
/// stay, every other byte becomes `%XX` with upper-case hex.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    percent_encode_into(text, &mut out);
    out
}

fn percent_encode_into(text: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

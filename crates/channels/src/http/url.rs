//! URL templates: `{name}` becomes the percent-encoded argument `name`, `{execution_id}` the
//! execution id.
//!
//! A rendered URL always goes where its template says: the same origin and the same number of
//! path segments. Percent-encoding keeps `/`, `?` and `#` out of a value, but `.` is unreserved,
//! so a value `..` (or two placeholders side by side filled with `.`) would be resolved by the
//! URL parser into another path, and an empty value would make `//`, which many servers merge;
//! such a rendering is refused ([`ChannelError::Steered`]) naming the placeholders, never the
//! values.

use crate::secret::percent_encode_into;
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
    let mut filled = Vec::new();
    let rendered = render(template, &mut |name: &str, out: &mut String| {
        if name == EXECUTION_ID_PLACEHOLDER {
            percent_encode_into(execution_id, out);
            return Ok(());
        }
        let text = argument_text(arguments, name)?;
        filled.push(name.to_string());
        percent_encode_into(&text, out);
        Ok(())
    })?;
    // No placeholder before the query: the origin and path are the template's own text, and a
    // query value is percent-encoded, so nothing can move the request (no URL to parse).
    if !template
        .split(['?', '#'])
        .next()
        .unwrap_or(template)
        .contains('{')
    {
        return Ok(rendered);
    }
    let shape = render(template, &mut |_: &str, out: &mut String| {
        out.push('x');
        Ok(())
    })?;
    if same_place(&shape, &rendered) {
        Ok(rendered)
    } else {
        // Name the placeholders of the path (the query cannot move the request).
        let path = template.split(['?', '#']).next().unwrap_or(template);
        let mut placeholders: Vec<String> = filled
            .into_iter()
            .filter(|n| path.contains(&format!("{{{n}}}")))
            .collect();
        placeholders.dedup();
        Err(ChannelError::Steered { placeholders })
    }
}

/// The URL as it is recorded: arguments filled in, except those named in `secret` (shown as
/// `***`); `{execution_id}` is kept as written when `execution_id` is `None`.
pub fn render_url_for_record(
    template: &str,
    arguments: &Map<String, Value>,
    secret: &dyn Fn(&str) -> bool,
    execution_id: Option<&str>,
) -> Result<String, ChannelError> {
    render(template, &mut |name: &str, out: &mut String| {
        if name == EXECUTION_ID_PLACEHOLDER {
            match execution_id {
                Some(id) => percent_encode_into(id, out),
                None => out.push_str("{execution_id}"),
            }
        } else if secret(name) {
            argument_text(arguments, name)?;
            out.push_str("***");
        } else {
            percent_encode_into(&argument_text(arguments, name)?, out);
        }
        Ok(())
    })
}

/// Checks at start-up that a template's placeholders stand only in its path or query.
pub fn check_template(template: &str) -> Result<(), ChannelError> {
    let neutral = |c: char| {
        move |_: &str, out: &mut String| {
            out.push(c);
            Ok(())
        }
    };
    let a = render(template, &mut neutral('a'))?;
    let b = render(template, &mut neutral('b'))?;
    let origin = |u: &str| ::url::Url::parse(u).map(|u| u.origin());
    match (origin(&a), origin(&b)) {
        (Ok(x), Ok(y)) if x == y => Ok(()),
        _ => Err(ChannelError::PlaceholderInOrigin {
            template: template.to_string(),
        }),
    }
}

/// Whether `rendered` has the origin of `shape` and the same path segments, none of them made
/// `.`, `..` or empty by a value.
fn same_place(shape: &str, rendered: &str) -> bool {
    let (Ok(s), Ok(r)) = (::url::Url::parse(shape), ::url::Url::parse(rendered)) else {
        return false;
    };
    if s.origin() != r.origin() {
        return false;
    }
    let raw_path = |u: &str| -> Vec<String> {
        let after_scheme = u.split_once("://").map_or(u, |(_, rest)| rest);
        let path = after_scheme
            .find('/')
            .map_or("", |i| &after_scheme[i..])
            .split(['?', '#'])
            .next()
            .unwrap_or("");
        path.split('/').map(str::to_string).collect()
    };
    let (sp, rp) = (raw_path(shape), raw_path(rendered));
    sp.len() == rp.len()
        && sp.iter().zip(&rp).all(|(s, r)| {
            s == r || !(r.is_empty() || r == "." || r == ".." || r.eq_ignore_ascii_case("%2e"))
        })
        && s.path_segments().map(Iterator::count) == r.path_segments().map(Iterator::count)
}

/// An argument's text for a URL: strings as they are, numbers and booleans as JSON.
fn argument_text(arguments: &Map<String, Value>, name: &str) -> Result<String, ChannelError> {
    match arguments.get(name) {
        None => Err(ChannelError::MissingArgument {
            placeholder: name.to_string(),
        }),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
        Some(other) => Err(ChannelError::UnrenderableArgument {
            placeholder: name.to_string(),
            kind: json_kind(other),
        }),
    }
}

type Fill<'a> = dyn FnMut(&str, &mut String) -> Result<(), ChannelError> + 'a;

/// Walks a template, copying its text and letting `fill` write each placeholder.
fn render(template: &str, fill: &mut Fill<'_>) -> Result<String, ChannelError> {
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
        fill(name, &mut out)?;
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
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

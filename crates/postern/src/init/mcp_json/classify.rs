//! Which of a server's tools `init --from-mcp-json` serves as reads, and why: from the tool's
//! own annotations where it gives them, from its name otherwise. The result is written into the
//! config as a list the operator reviews (each line saying why), never decided at serve time:
//! the gateway serves what the config says.

use std::fmt::Write as _;

use serde_json::Value;

use super::{one_line, quote};

/// Verbs that begin the name of a tool that only reads (`get-sum`, `get_file_info`,
/// `getUser` alike).
const READ_VERBS: [&str; 10] = [
    "list", "read", "get", "search", "open", "find", "describe", "show", "view", "query",
];
/// Nouns that end the name of a tool that describes something (`directory_tree`,
/// `get_file_info`), when its first word is not a verb of change.
const READ_NOUNS: [&str; 4] = ["tree", "info", "status", "schema"];
/// First words that make a name a change whatever it ends with (`set_status`).
const CHANGE_VERBS: [&str; 12] = [
    "set", "update", "create", "delete", "remove", "write", "edit", "add", "move", "put", "toggle",
    "trigger",
];

/// One tool as a server listed it to `init`.
pub struct Listed {
    pub name: String,
    /// Its annotations as sent (`readOnlyHint`, `destructiveHint`, …).
    pub annotations: Option<Value>,
}

/// Whether a tool only reads, and why (a comment beside it in the config).
pub(super) fn classify(name: &str, annotations: Option<&Value>) -> (bool, String) {
    let hint = |key: &str| {
        annotations
            .and_then(|a| a.get(key))
            .and_then(Value::as_bool)
    };
    // readOnlyHint decides when given: destructiveHint only means something for a tool that
    // is not read-only (MCP's tool annotations).
    if let Some(read) = hint("readOnlyHint") {
        return (read, format!("readOnlyHint: {read}"));
    }
    if hint("destructiveHint") == Some(true) {
        return (false, "destructiveHint: true".into());
    }
    let words = words(name);
    let (Some(first), Some(last)) = (words.first(), words.last()) else {
        return (false, "no annotation says it only reads".into());
    };
    if READ_VERBS.contains(&first.as_str()) {
        // The name as written, up to its first word's end and separator.
        let shown: String = name.chars().take(first.len() + 1).collect();
        return (true, format!("name starts with {}", one_line(&shown)));
    }
    if words.len() > 1
        && READ_NOUNS.contains(&last.as_str())
        && !CHANGE_VERBS.contains(&first.as_str())
    {
        return (true, format!("name ends with the noun {last}"));
    }
    (
        false,
        "neither an annotation nor its name says it only reads".into(),
    )
}

/// A name's words, lowercase: split at '-', '_', '.', spaces and lower-to-upper case changes,
/// so `get-sum`, `get_sum` and `getSum` are alike.
fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut lower_before = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.' | ' ') {
            words.extend((!word.is_empty()).then(|| std::mem::take(&mut word)));
            lower_before = false;
            continue;
        }
        if c.is_uppercase() && lower_before {
            words.push(std::mem::take(&mut word));
        }
        lower_before = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    words.extend((!word.is_empty()).then_some(word));
    words
}

/// What a server's tools were, as `init` got them (`None`: not asked).
pub(super) type Tools<'a> = Option<&'a Result<Vec<Listed>, String>>;

/// The comment line saying how `read_only` below was chosen.
pub(super) fn why_read_only(tools: Tools<'_>) -> String {
    match tools {
        Some(Ok(listed)) => format!("The server listed {} tool(s) when `postern init` asked it: each\n# one that only reads, by its annotations or its name, is named, with why; the others, and any\n# tool it lists later, are served as default_class.", listed.len()),
        // A server that did not answer in time (or could not be started) still gets the
        // patterns: onboarding does not wait on it, and the names usually say enough.
        Some(Err(why)) => format!("Its tools could not be listed when `postern init` asked\n# ({}): tools whose names match a pattern below are served as reads.", one_line(why)),
        None => "Tools whose names match a pattern below are served as reads.".into(),
    }
}

/// The `read_only` key: the listed tools that only read, or the name patterns.
pub(super) fn read_only_key(tools: Tools<'_>) -> String {
    match tools {
        Some(Ok(listed)) => read_only_list(listed),
        _ => format!("read_only = {}\n", fallback_patterns()),
    }
}

/// How many tools are served as reads, or how they are chosen, for `init`'s summary.
pub(super) fn summary(tools: Tools<'_>) -> String {
    match tools {
        Some(Ok(listed)) => {
            let reads = listed
                .iter()
                .filter(|t| postern_core::contract::valid_tool_name(&t.name))
                .filter(|t| classify(&t.name, t.annotations.as_ref()).0)
                .count();
            format!("({reads} of {} tools as reads)", listed.len())
        }
        Some(Err(why)) => format!(
            "(its tools not listed: {}; reads by name pattern)",
            one_line(why)
        ),
        None => "(reads by name pattern)".into(),
    }
}

/// The `read_only` patterns of a server whose tools `init` could not list: the read verbs
/// followed by either separator (`get_*`, `get-*`).
fn fallback_patterns() -> String {
    let patterns: Vec<String> = READ_VERBS
        .iter()
        .flat_map(|v| [format!("{v}_*"), format!("{v}-*")])
        .map(|p| quote(&p))
        .collect();
    format!("[{}]", patterns.join(", "))
}

/// `read_only` naming each listed tool that only reads, a comment beside each saying why, then
/// a comment listing the others (served as `default_class`) with theirs.
fn read_only_list(tools: &[Listed]) -> String {
    let mut reads = Vec::new();
    let mut others = Vec::new();
    for t in tools {
        if !postern_core::contract::valid_tool_name(&t.name) {
            others.push((
                quote(&t.name),
                "not served: not a valid tool name".to_string(),
            ));
            continue;
        }
        match classify(&t.name, t.annotations.as_ref()) {
            (true, why) => reads.push((quote(&t.name), why)),
            (false, why) => others.push((quote(&t.name), why)),
        }
    }
    let width = reads
        .iter()
        .chain(&others)
        .map(|(n, _)| n.chars().count() + 1)
        .max()
        .unwrap_or(0);
    let mut out = String::from("read_only = [\n");
    for (name, why) in &reads {
        let _ = writeln!(out, "  {:<width$} # {why}", format!("{name},"));
    }
    out.push_str("]\n");
    if !others.is_empty() {
        out.push_str("# Served as default_class:\n");
        for (name, why) in &others {
            let _ = writeln!(out, "#   {:<width$} # {why}", one_line(name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::classify;

    #[test]
    fn annotations_decide_first_then_the_name_with_either_separator() {
        let read = |name: &str, a: Option<serde_json::Value>| classify(name, a.as_ref());
        assert_eq!(
            read("echo", Some(json!({"readOnlyHint": true}))),
            (true, "readOnlyHint: true".into())
        );
        assert_eq!(
            read("get_thing", Some(json!({"readOnlyHint": false}))),
            (false, "readOnlyHint: false".into())
        );
        assert_eq!(
            read("list_x", Some(json!({"destructiveHint": true}))),
            (false, "destructiveHint: true".into())
        );
        assert_eq!(
            read("get-sum", None),
            (true, "name starts with get-".into())
        );
        assert_eq!(
            read("get_env", None),
            (true, "name starts with get_".into())
        );
        assert!(read("getUser", None).0);
        assert!(read("open_nodes", None).0);
        assert!(read("search_nodes", None).0);
        assert_eq!(
            read("directory_tree", None),
            (true, "name ends with the noun tree".into())
        );
        for write in [
            "create_entities",
            "write_file",
            "set_status",
            "getaway",
            "budget-list",
            "toggle-simulated-logging",
            "",
        ] {
            assert!(!read(write, None).0, "{write}");
        }
    }
}

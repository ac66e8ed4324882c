//! `docs/config.md`'s Keys by table against the config types: every key a table of
//! `postern.toml` accepts is listed there, and every key listed there is accepted.
//!
//! No list of keys is kept here. The parser itself is asked: each table denies unknown keys,
//! and a key it does not know is refused with serde's message, which names every key the
//! table takes (``unknown field `x`, expected one of `a`, `b`, …``). Which of those keys are
//! tables themselves (`[gateway.tls]`, `[[tool]]`, `[credential.NAME]`) is found the same way,
//! by giving the key a table, an array of tables or a table of named tables holding an
//! unknown key, so a table added to a config type is found without being named here.

use std::collections::BTreeMap;

use postern_core::config::Config;
use toml::{Table, Value};

const DOC: &str = include_str!("../../../../docs/config.md");

/// A key no table has.
const PROBE: &str = "zz_undocumented_probe";

/// A valid configuration every probe is added to: its stdio upstream is where `sandbox` (a
/// table read after the TOML shapes, with the upstream's other settings) can be reached.
const SEED: &str =
    "[gateway]\nfingerprint_key = { env = \"K\" }\n\n[upstream.seed]\ncommand = [\"true\"]\n";

/// How a key holds a table.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// `[key]`, or `key = { … }`.
    Table,
    /// `[[key]]`.
    Array,
    /// `[key.NAME]`.
    Named,
}

/// A table the parser has: where it is, the keys it accepts, and which of them are tables.
struct Found {
    path: Vec<(String, Shape)>,
    keys: Vec<String>,
    tables: Vec<String>,
}

/// The table's name as docs/config.md writes it: `[gateway.tls]`, `[[tool]]`,
/// `[tool.recovery.status_query]`, `[upstream.NAME.sandbox]`.
fn heading(path: &[(String, Shape)]) -> String {
    let name: Vec<String> = path
        .iter()
        .map(|(key, shape)| match shape {
            Shape::Named => format!("{key}.NAME"),
            Shape::Table | Shape::Array => key.clone(),
        })
        .collect();
    match path.last() {
        None => "the top level".to_string(),
        Some((_, Shape::Array)) => format!("[[{}]]", name.join(".")),
        Some(_) => format!("[{}]", name.join(".")),
    }
}

/// The table at `key` of `table`, made (or remade) in the shape asked for; of an array or a
/// named table, the first one.
fn enter<'t>(table: &'t mut Table, key: &str, shape: Shape) -> &'t mut Table {
    let slot = table.entry(key).or_insert(Value::Boolean(false));
    let fits = match shape {
        Shape::Table => slot.is_table(),
        Shape::Array => slot
            .as_array()
            .is_some_and(|a| a.first().is_some_and(Value::is_table)),
        Shape::Named => slot
            .as_table()
            .is_some_and(|t| t.iter().next().is_some_and(|(_, v)| v.is_table())),
    };
    if !fits {
        *slot = match shape {
            Shape::Table => Value::Table(Table::new()),
            Shape::Array => Value::Array(vec![Value::Table(Table::new())]),
            Shape::Named => Value::Table(Table::from_iter([(
                "NAME".to_string(),
                Value::Table(Table::new()),
            )])),
        };
    }
    let inner = match shape {
        Shape::Table => slot,
        Shape::Array => &mut slot.as_array_mut().unwrap()[0],
        Shape::Named => slot.as_table_mut().unwrap().iter_mut().next().unwrap().1,
    };
    inner.as_table_mut().unwrap()
}

/// What the parser says of the seed with `key = value` in the table at `path`
/// (empty: nothing, it was accepted).
fn parse_with(path: &[(String, Shape)], key: &str, value: Value) -> String {
    let mut doc: Table = SEED.parse().unwrap();
    let mut table = &mut doc;
    for (k, shape) in path {
        table = enter(table, k, *shape);
    }
    table.insert(key.to_string(), value);
    let text = toml::to_string(&doc).unwrap();
    Config::parse(&text, "probe.toml").map_or_else(|e| e.message, |_| String::new())
}

/// The keys the table at `path` accepts, if there is a table there that refuses an unknown
/// key: read from serde's message.
fn keys_of(path: &[(String, Shape)]) -> Option<Vec<String>> {
    let message = parse_with(path, PROBE, Value::Boolean(true));
    let refused = format!("unknown field `{PROBE}`, ");
    let rest = &message[message.find(&refused)? + refused.len()..];
    if rest.starts_with("there are no fields") {
        return Some(Vec::new());
    }
    let expected = rest.strip_prefix("expected ")?;
    Some(ticked(expected))
}

/// The `quoted` words of `text`.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// Every table under `path` (itself included), each before its own tables.
fn discover(path: Vec<(String, Shape)>, found: &mut Vec<Found>) {
    assert!(path.len() < 8, "{}: tables nest too deep", heading(&path));
    let keys = keys_of(&path).unwrap_or_else(|| {
        panic!(
            "{}: an unknown key is not refused with serde's `unknown field` message",
            heading(&path)
        )
    });
    let mut children = Vec::new();
    for key in &keys {
        for shape in [Shape::Table, Shape::Array, Shape::Named] {
            let mut child = path.clone();
            child.push((key.clone(), shape));
            if keys_of(&child).is_some() {
                children.push(child);
                break;
            }
        }
    }
    let tables = children
        .iter()
        .map(|c| c.last().unwrap().0.clone())
        .collect();
    found.push(Found { path, keys, tables });
    for child in children {
        discover(child, found);
    }
}

fn parser_tables() -> Vec<Found> {
    let mut found = Vec::new();
    discover(Vec::new(), &mut found);
    found
}

/// docs/config.md's `## Keys by table`: each bold heading's tables (``**`[gateway]`**``; one
/// heading may name several that share their keys) with the keys in the first cell of the
/// table rows under it.
fn documented() -> BTreeMap<String, Vec<String>> {
    let section = DOC
        .split("\n## Keys by table\n")
        .nth(1)
        .expect("docs/config.md has a `## Keys by table` section");
    let section = section.split("\n## ").next().unwrap();
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Vec<String> = Vec::new();
    for line in section.lines() {
        if let Some(bold) = line.strip_prefix("**`[") {
            let bold = format!("`[{}", bold.split("**").next().unwrap());
            current = ticked(&bold);
            for name in &current {
                tables.entry(name.clone()).or_default();
            }
        } else if let Some(row) = line.strip_prefix('|') {
            let keys = ticked(row.split('|').next().unwrap());
            assert!(
                keys.is_empty() || !current.is_empty(),
                "docs/config.md: a row of keys before any table heading: {line}"
            );
            for name in &current {
                tables.get_mut(name).unwrap().extend(keys.iter().cloned());
            }
        }
    }
    tables
}

/// A key that holds a table is documented by that table's own heading and rows (it may also
/// have a row in its parent's); every other key needs a row under its table's heading.
#[test]
fn config_md_documents_every_key_the_parser_accepts() {
    let docs = documented();
    let mut missing = Vec::new();
    for table in parser_tables() {
        let listed = docs.get(&heading(&table.path));
        for key in table.keys.iter().filter(|k| !table.tables.contains(k)) {
            if !listed.is_some_and(|keys| keys.contains(key)) {
                missing.push(format!(
                    "{}: `{key}` is accepted by the parser but not documented (a row under **`{}`** in docs/config.md's Keys by table)",
                    heading(&table.path),
                    heading(&table.path),
                ));
            }
        }
    }
    assert!(missing.is_empty(), "\n{}\n", missing.join("\n"));
}

#[test]
fn config_md_documents_only_keys_the_parser_accepts() {
    let tables = parser_tables();
    let mut wrong = Vec::new();
    for (name, keys) in documented() {
        let Some(table) = tables.iter().find(|t| heading(&t.path) == name) else {
            let known: Vec<String> = tables
                .iter()
                .filter(|t| !t.path.is_empty())
                .map(|t| heading(&t.path))
                .collect();
            wrong.push(format!(
                "{name}: docs/config.md documents this table, but the parser has none by that name (it has {})",
                known.join(", ")
            ));
            continue;
        };
        for key in keys {
            let message = parse_with(&table.path, &key, Value::Boolean(true));
            if !table.keys.contains(&key) || message.contains(&format!("unknown field `{key}`")) {
                wrong.push(format!(
                    "{name}: docs/config.md lists `{key}`, which the parser refuses: {message}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}\n", wrong.join("\n"));
}

//! `[[budget]]` tables (issue 53): each checked against the tools and actors it names, so a
//! budget the gateway could not count is refused at start-up.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;
use toml::Spanned;

use super::Actor;
use crate::budget::{amount_of, Budget, OnExhausted, Partition};
use crate::contract::ToolContract;
use crate::duration::parse_duration;

type Fault = (usize, String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudget {
    pub name: Spanned<String>,
    pub tools: Vec<String>,
    pub actors: Option<Vec<String>>,
    pub per: Option<Vec<String>>,
    pub window: String,
    pub max_calls: Option<u64>,
    pub sum: Option<String>,
    pub max_sum: Option<toml::Value>,
    pub on_exhausted: Option<String>,
}

/// The budgets, in order.
pub(super) fn budgets(
    raw: Vec<RawBudget>,
    tools: &[ToolContract],
    actors: &[Actor],
) -> Result<Vec<Budget>, Fault> {
    let mut budgets: Vec<Budget> = Vec::new();
    for b in raw {
        let offset = b.name.span().start;
        let name = b.name.get_ref().clone();
        if budgets.iter().any(|x| x.name == name) {
            return Err((offset, format!("budget {name:?} is declared twice")));
        }
        let budget =
            build(b, tools, actors).map_err(|m| (offset, format!("budget {name:?}: {m}")))?;
        budgets.push(budget);
    }
    Ok(budgets)
}

fn build(b: RawBudget, tools: &[ToolContract], actors: &[Actor]) -> Result<Budget, String> {
    let name = b.name.into_inner();
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"_-.".contains(&c))
    {
        return Err("name: 1 to 64 letters, digits, '_', '-' or '.'".into());
    }
    let window = parse_duration(&b.window).map_err(|e| format!("window: {e}"))?;
    if window.is_zero() {
        return Err("window: must be longer than 0s".into());
    }
    let counted = counted_tools(&b.tools, tools, window)?;
    let actors_named = match b.actors {
        None => None,
        Some(list) => {
            for a in &list {
                if !actors.iter().any(|x| &x.name == a) {
                    return Err(format!("actors: no [[actor]] is named {a:?}"));
                }
            }
            Some(list.into_iter().collect::<BTreeSet<_>>())
        }
    };
    let per = b
        .per
        .unwrap_or_default()
        .into_iter()
        .map(|p| match p.as_str() {
            "actor" => Ok(Partition::Actor),
            _ => {
                for t in &counted {
                    finite(t, &p)?;
                }
                Ok(Partition::Argument(p))
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    let sum = match (b.sum, b.max_sum) {
        (None, None) => None,
        (Some(argument), Some(limit)) => {
            for t in &counted {
                numeric(t, &argument)?;
            }
            Some((argument, limit_of(&limit)?))
        }
        (Some(_), None) => return Err("sum: needs max_sum, the most it may add up to".into()),
        (None, Some(_)) => return Err("max_sum: needs sum, the argument it adds up".into()),
    };
    if b.max_calls.is_none() && sum.is_none() {
        return Err(
            "set max_calls, or sum and max_sum: a budget with no limit counts nothing".into(),
        );
    }
    let on_exhausted = match b.on_exhausted.as_deref() {
        None | Some("approval") => OnExhausted::Approval,
        Some("refuse") => OnExhausted::Refuse,
        Some(other) => {
            return Err(format!(
                "on_exhausted: {other:?} is not \"approval\" or \"refuse\""
            ))
        }
    };
    Ok(Budget {
        name,
        tools: counted.iter().map(|t| t.name.clone()).collect(),
        actors: actors_named,
        per,
        window,
        max_calls: b.max_calls,
        sum,
        on_exhausted,
    })
}

/// The tools a budget names: each a `[[tool]]` with an effect, whose record is kept at least
/// as long as the window (a count is kept with its execution's record).
fn counted_tools<'t>(
    names: &[String],
    tools: &'t [ToolContract],
    window: std::time::Duration,
) -> Result<Vec<&'t ToolContract>, String> {
    if names.is_empty() {
        return Err("tools: name at least one [[tool]]".into());
    }
    names
        .iter()
        .map(|n| {
            let t = tools
                .iter()
                .find(|t| &t.name == n)
                .ok_or_else(|| format!("tools: no [[tool]] is named {n:?} (a budget counts [[tool]]s: to budget a tool an upstream serves with expose = \"all\", declare it as a [[tool]] with an mcp table)"))?;
            if t.class.is_read_only() {
                return Err(format!("tools: {n:?} is read_only: it has no effect to budget"));
            }
            if t.retention < window {
                return Err(format!("window: tool {n:?} keeps its records for {}s, less than the window: its retention must be at least the window", t.retention.as_secs()));
            }
            Ok(t)
        })
        .collect()
}

/// The argument's schema in `tool`, when its schema declares properties; an error when it
/// declares them and not this one.
fn declared<'t>(
    tool: &'t ToolContract,
    argument: &str,
    field: &str,
) -> Result<Option<&'t Value>, String> {
    let Some(props) = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    else {
        return Ok(None);
    };
    props.get(argument).map(Some).ok_or_else(|| {
        format!(
            "{field}: {argument:?} is not an argument of tool {:?}",
            tool.name
        )
    })
}

/// An argument a budget is partitioned by must take one of a few values the config lists
/// (`enum`, `const` or a boolean): the agent chooses its value, and each new value would start
/// a count of its own, so a free-text argument would let an agent escape the budget by
/// inventing values. Calls are checked against the schema before they are counted.
fn finite(tool: &ToolContract, argument: &str) -> Result<(), String> {
    let schema = declared(tool, argument, "per")?.ok_or_else(|| {
        format!("per: tool {:?} declares no input_schema properties, so {argument:?} could take any value; declare it with an \"enum\" of its values", tool.name)
    })?;
    let listed: Vec<&Value> = match (schema.get("enum"), schema.get("const")) {
        (Some(Value::Array(values)), _) => values.iter().collect(),
        (_, Some(value)) => vec![value],
        _ => Vec::new(),
    };
    // A number has many spellings a schema accepts as one value (2, 2.0, 2e0), and each would
    // be a scope of its own: only strings, booleans and null are one spelling each.
    if listed
        .iter()
        .any(|v| v.is_number() || v.is_array() || v.is_object())
    {
        return Err(format!("per: argument {argument:?} of tool {:?} lists numbers (or lists or objects) among its values; a number has many spellings, each of which would start a count of its own: list strings instead", tool.name));
    }
    let boolean = schema.get("type").and_then(Value::as_str) == Some("boolean");
    if !listed.is_empty() || boolean {
        return Ok(());
    }
    Err(format!("per: argument {argument:?} of tool {:?} may take any value, and each new value would start a count of its own (an agent could escape the budget by inventing values); declare it with an \"enum\" of its values, or partition by \"actor\" only", tool.name))
}

/// The summed argument must be a number wherever a schema says what it is.
fn numeric(tool: &ToolContract, argument: &str) -> Result<(), String> {
    let Some(schema) = declared(tool, argument, "sum")? else {
        return Ok(());
    };
    match schema.get("type").and_then(Value::as_str) {
        Some("number" | "integer") => Ok(()),
        _ => Err(format!("sum: argument {argument:?} of tool {:?} must be declared \"type\": \"number\" or \"integer\"", tool.name)),
    }
}

/// A `max_sum` in millionths: a number of at least 0 with at most six decimals.
fn limit_of(value: &toml::Value) -> Result<i64, String> {
    let text = match value {
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        _ => return Err("max_sum: must be a number".into()),
    };
    let number: serde_json::Number = text
        .parse()
        .map_err(|_| "max_sum: must be a number".to_string())?;
    amount_of(&number)
        .filter(|a| *a >= 0)
        .ok_or_else(|| "max_sum: must be at least 0, with at most six decimals".into())
}

//! `postern activity trace`: the investigation view (see `postern_pipeline::investigate`).

use anyhow::{bail, Result};
use postern_core::ExecutionId;
use postern_ledger::{ListFilter, StoreReader};
use postern_pipeline::investigate::{self, RELATED};

use crate::terminal::shown;

/// One execution (`id`), or every execution `filter` selects (its actor, fingerprint or key).
pub async fn run(
    id: Option<&str>,
    filter: ListFilter,
    store: StoreReader,
    json: bool,
) -> Result<i32> {
    if let Some(id) = id {
        return one(id, &store, json).await;
    }
    let by_key = filter.operation_key.is_some();
    let filter = ListFilter {
        limit: RELATED,
        ..filter
    };
    let mut found = store.list(&filter).await?;
    // A key names one execution; its intent's other executions explain the duplicate.
    if by_key {
        if let Some(first) = found.first().cloned() {
            let same_intent = ListFilter {
                actor: Some(first.actor.clone()),
                fingerprint: Some(first.fingerprint.to_string()),
                limit: RELATED,
                ..ListFilter::default()
            };
            for e in store.list(&same_intent).await? {
                if !found.iter().any(|f| f.id == e.id) {
                    found.push(e);
                }
            }
        }
    }
    if found.is_empty() {
        bail!(
            "no execution of that {} in this store",
            if by_key { "key" } else { "fingerprint" }
        );
    }
    let rows = investigate::side_by_side(&found);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    println!("{} execution(s), oldest first:", rows.len());
    for r in &rows {
        println!(
            "  {}  {}  {} {}  state {}  sent {}x  key {}  run {}",
            r.execution_id,
            r.accepted_at,
            shown(&r.actor),
            shown(&r.tool),
            r.state,
            r.dispatches,
            r.operation_key.as_deref().map(shown).unwrap_or("-".into()),
            r.run_id.as_deref().map(shown).unwrap_or("-".into()),
        );
        if let Some(why) = &r.separate_because {
            println!("      separate from the one before: {}", shown(why));
        }
    }
    Ok(0)
}

async fn one(id: &str, store: &StoreReader, json: bool) -> Result<i32> {
    let id: ExecutionId = id.parse()?;
    let Some(found) = investigate::investigate(store, id).await? else {
        bail!("no execution {id} in this store");
    };
    let trace = found.trace;
    if json {
        println!("{}", serde_json::to_string_pretty(&trace)?);
        return Ok(0);
    }
    println!(
        "execution    {} ({} by {})",
        trace.execution_id,
        shown(&trace.tool),
        shown(&trace.actor)
    );
    if let Some(who) = &trace.acting_for {
        println!("acting for   {}", shown(who));
    }
    println!("state        {}", trace.state);
    println!("fingerprint  {}", trace.fingerprint);
    for (i, answer) in trace.answers.iter().enumerate() {
        println!();
        println!("{}. {}", i + 1, answer.question);
        println!("   {}", shown(&answer.answer));
        for e in &answer.evidence {
            let mut facts = Vec::new();
            for (name, v) in [
                ("execution", &e.execution_id),
                ("run", &e.run_id),
                ("json-rpc id", &e.request_id),
                ("key", &e.operation_key),
                ("fingerprint", &e.fingerprint),
            ] {
                if let Some(v) = v {
                    facts.push(format!("{name} {}", shown(v)));
                }
            }
            if let Some(n) = e.event {
                facts.push(format!("event {n}"));
            }
            println!(
                "     - {}  {}  [{}]",
                e.at.as_deref().unwrap_or("-"),
                shown(&e.what),
                facts.join(", ")
            );
        }
    }
    Ok(0)
}

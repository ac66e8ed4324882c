//! `activity trace`'s question 1, one agent process or two: the runs that sent calls
//! matching the execution, told from the Sessions log and the calls log.

use postern_ledger::{CallRecord, ExecutionSummary, Run};

use super::{
    at, call_evidence, is_status_read, runs_to_read, Answer, Evidence, TraceInput, QUESTIONS,
    STATUS_TOOL,
};

/// `client NAME VERSION`, as the run's client named itself.
fn client_of(r: &Run) -> String {
    match (&r.client_name, &r.client_version) {
        (Some(n), Some(v)) => format!("client {n} {v}"),
        (Some(n), None) => format!("client {n}"),
        _ => "client unnamed".to_string(),
    }
}

fn describe_run(r: &Run) -> String {
    let client = client_of(r);
    let ended = match (r.ended_at, r.end_reason) {
        (Some(t), Some(how)) => format!(", ended {t} ({})", how.as_str()),
        (Some(t), None) => format!(", ended {t}"),
        _ => ", still open".to_string(),
    };
    format!(
        "run {} ({client}, {}{}, started {}{ended})",
        r.id,
        r.transport,
        r.protocol_version
            .as_ref()
            .map(|p| format!(" {p}"))
            .unwrap_or_default(),
        r.started_at
    )
}

/// The client every one of `ids` named, when they all named the same one.
fn same_client(runs: &[Run], ids: &[String]) -> Option<String> {
    let mut clients = ids.iter().map(|id| {
        let r = runs.iter().find(|r| &r.id == id)?;
        Some(format!(
            "{} {}",
            r.client_name.as_deref()?,
            r.client_version.as_deref().unwrap_or("(no version)")
        ))
    });
    let first = clients.next()??;
    clients.all(|c| c.as_ref() == Some(&first)).then_some(first)
}

/// The run `id` in the Sessions log, if it still holds it.
fn run_of<'a>(runs: &'a [Run], id: &str) -> Option<&'a Run> {
    runs.iter().find(|r| r.id == id)
}

/// Oldest run first (one the Sessions log no longer holds, last).
fn oldest_first(runs: &[Run], ids: &mut [String]) {
    ids.sort_by_key(|id| run_of(runs, id).map_or(i64::MAX, |r| r.started_at.0));
}

/// A run as the answer names it: its id and its client.
fn named(runs: &[Run], id: &str) -> String {
    match run_of(runs, id) {
        Some(r) => format!("run {id} ({})", client_of(r)),
        None => format!("run {id} (not in the Sessions log any more)"),
    }
}

/// Question 1: the runs that sent calls matching this execution, oldest first (status reads
/// are named apart: a run that only read the record sent no action). Each run's evidence is
/// its Sessions log entry and the calls it sent.
pub(super) fn processes(input: &TraceInput<'_>) -> Answer {
    let (actions, reads): (Vec<&CallRecord>, Vec<&CallRecord>) =
        input.calls.iter().partition(|c| !is_status_read(c));
    let ids = acting_runs(input, &actions);
    let mut evidence = run_evidence(input);
    let runless: Vec<&&CallRecord> = actions.iter().filter(|c| c.run_id.is_none()).collect();
    evidence.extend(runless.iter().map(|c| Evidence {
        what: format!("a call that named no run: {}", call_evidence(c).what),
        ..call_evidence(c)
    }));
    let mut answer = how_many_runs(input.runs, &ids, actions.is_empty());
    if !runless.is_empty() && !ids.is_empty() {
        answer.push_str(&format!(
            " {} call(s) named no run, so they may have come from another process.",
            runless.len()
        ));
    }
    let readers = only_readers(&reads, &ids);
    if !readers.is_empty() {
        answer.push_str(&format!(
            " Run(s) {} only read its status ({STATUS_TOOL}).",
            readers.join(", ")
        ));
    }
    same_intent(input, &mut answer, &mut evidence);
    Answer {
        question: QUESTIONS[0],
        answer,
        evidence,
    }
}

/// The runs that sent actions for the execution (and the run it names), oldest first.
fn acting_runs(input: &TraceInput<'_>, actions: &[&CallRecord]) -> Vec<String> {
    let mut ids: Vec<String> = actions.iter().filter_map(|c| c.run_id.clone()).collect();
    ids.extend(input.view.summary.run_id.clone());
    ids.sort();
    ids.dedup();
    oldest_first(input.runs, &mut ids);
    ids
}

/// One fact per run the trace reads, oldest first: its Sessions log entry and what it sent.
fn run_evidence(input: &TraceInput<'_>) -> Vec<Evidence> {
    let mut every_run = runs_to_read(input.view, input.calls);
    oldest_first(input.runs, &mut every_run);
    every_run
        .iter()
        .map(|id| {
            let run = run_of(input.runs, id);
            let what = format!(
                "{}: {}",
                run.map_or_else(
                    || format!("run {id} (not in the Sessions log any more)"),
                    describe_run
                ),
                sent_by(input.calls, id)
            );
            Evidence {
                what,
                at: run.and_then(|r| at(r.started_at)),
                run_id: Some(id.clone()),
                ..Evidence::default()
            }
        })
        .collect()
}

/// The calls run `id` sent, by JSON-RPC id and attempt, or that it sent none.
fn sent_by(calls: &[CallRecord], id: &str) -> String {
    let sent: Vec<String> = calls
        .iter()
        .filter(|c| c.run_id.as_deref() == Some(id))
        .map(|c| {
            format!(
                "JSON-RPC id {} ({}{})",
                c.request_id.as_deref().unwrap_or("?"),
                c.attempt,
                if is_status_read(c) {
                    ", a status read"
                } else {
                    ""
                }
            )
        })
        .collect();
    if sent.is_empty() {
        "no call of it in the calls log (the execution names it)".to_string()
    } else {
        format!("sent {}", sent.join(", "))
    }
}

/// The answer's first sentence: how many runs, so how many processes, sent the actions (or
/// why the record cannot tell).
fn how_many_runs(runs: &[Run], ids: &[String], no_actions: bool) -> String {
    match ids {
        [] if no_actions => "The record cannot tell: no call of this execution is in the calls log (it predates the log, or the gateway stopped before recording it).".to_string(),
        [] => "The record cannot tell: no call of this execution named a run (sessionless calls without io.postern/run).".to_string(),
        [one] => format!(
            "One agent process (one run): every call that reached this execution came from {}.",
            named(runs, one)
        ),
        many => {
            let mut s = format!(
                "{n} runs, so {n} agent processes as far as the gateway can tell: calls reached this execution from {}.",
                many.iter().map(|id| named(runs, id)).collect::<Vec<_>>().join(" and "),
                n = many.len(),
            );
            if let Some(client) = same_client(runs, many) {
                s.push_str(&format!(
                    " All name the same client ({client}): instances of that agent, or one process that opened a new session (after a lost connection, say); the record cannot tell which."
                ));
            }
            s
        }
    }
}

/// The runs that only read the execution's status (sent none of its actions).
fn only_readers<'a>(reads: &[&'a CallRecord], ids: &[String]) -> Vec<&'a str> {
    let mut readers: Vec<&str> = reads.iter().filter_map(|c| c.run_id.as_deref()).collect();
    readers.sort();
    readers.dedup();
    readers.retain(|r| !ids.iter().any(|id| id == r));
    readers
}

/// The other executions of the same intent (same actor and fingerprint), named in the answer
/// and given as evidence: another process may have made them.
fn same_intent(input: &TraceInput<'_>, answer: &mut String, evidence: &mut Vec<Evidence>) {
    let others: Vec<&ExecutionSummary> = input
        .related
        .iter()
        .filter(|e| {
            e.id != input.view.summary.id && e.fingerprint == input.view.summary.fingerprint
        })
        .collect();
    if others.is_empty() {
        return;
    }
    let described: Vec<String> = others
        .iter()
        .map(|e| {
            format!(
                "{} ({}, accepted {}, from {})",
                e.id,
                e.lifecycle.state.name(),
                e.accepted_at,
                e.run_id.as_deref().unwrap_or("no run")
            )
        })
        .collect();
    answer.push_str(&format!(
        " The same intent (same actor and fingerprint) also has execution(s) {}.",
        described.join("; ")
    ));
    evidence.extend(others.iter().map(|e| Evidence {
        what: format!(
            "another execution of this intent: {}",
            e.lifecycle.state.name()
        ),
        at: at(e.accepted_at),
        execution_id: Some(e.id.to_string()),
        run_id: e.run_id.clone(),
        operation_key: e.operation_key.clone(),
        fingerprint: Some(e.fingerprint.to_string()),
        ..Evidence::default()
    }));
}

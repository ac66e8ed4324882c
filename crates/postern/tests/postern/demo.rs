//! `postern demo`, the README's first command: it runs every scenario against a real gateway,
//! target and ledger, and its story must hold (one invoice per intent, a resumed stream, a
//! verified audit chain).

use std::process::Command;

#[test]
fn the_demo_runs_and_tells_a_true_story() {
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .arg("demo")
        .output()
        .expect("postern demo runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        // the lost answer: recovered, once
        "holds 1 invoice(s) for globex",
        "attempt recovered",
        // the cut stream: resumed, nothing sent again
        "Last-Event-ID:",
        "replayed event(s)",
        "holds 1 invoice(s) for hooli",
        "delivery_failed → delivered",
        // a new key is a new action; a conflict changes nothing
        "holds 2 invoice(s) for acme",
        "error -32010",
        // unknown outcomes: status query for the idempotent tool, a human for the irreversible
        "holds 1 invoice(s) for initech",
        "needs_review",
        // https with the demo's CA; the public roots alone refuse it, nothing sent
        "holds 1 invoice(s) for stark",
        "certificate not trusted (unknown CA)",
        // a call that needs a person: waits, approved once, sent once
        "awaiting_approval",
        "holds 1 invoice(s) for wayne",
        "approval_requested → authorized → dispatched → completed(applied)",
        // an upstream MCP server's lost answer: applied once upstream, the retry from the record
        "upstream   applied 1 call(s) for umbrella",
        "_meta io.postern/execution-id: exe_",
        // the audit chain verifies
        "VALID: every event links",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

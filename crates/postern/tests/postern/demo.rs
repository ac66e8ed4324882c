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
        // and the lost answer can be investigated
        "The lost answer of scene 2, investigated: postern activity trace exe_",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // The command it prints answers the five questions for that lost answer.
    let printed = text
        .lines()
        .find_map(|l| l.split_once("investigated: postern "))
        .map(|(_, command)| command.split_whitespace().collect::<Vec<_>>())
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(&printed)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let answer = |q: usize| {
        trace["answers"][q - 1]["answer"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(answer(2).contains("Dispatched once"), "{trace:#}");
    assert!(
        answer(4).starts_with("Yes: the target completed"),
        "{trace:#}"
    );
    assert!(answer(5).contains("(recovered)"), "{trace:#}");
    // Scene 2's retry came on a new session of the same client: two runs, and the answer says
    // it cannot tell two instances from one process that reconnected.
    assert!(answer(1).starts_with("2 runs"), "{trace:#}");
    assert!(
        answer(1).contains("All name the same client (postern-demo-agent "),
        "{trace:#}"
    );
}

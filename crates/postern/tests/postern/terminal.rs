//! Issue 33, point 1: what an operator's terminal shows cannot be forged by an agent or by
//! another operator. Keys an agent chooses (run id, operation key, re-issue key, intent scope)
//! are refused at the front when they hold control or invisible formatting characters; what
//! cannot be refused (a client's name, an operator's reason) is printed escaped by every CLI
//! verb, and the `approvals approve` prompt is read back through a real pty (`script`).

use std::process::{Command, Stdio};

use serde_json::json;

use crate::approvals::approval_config;
use crate::harness::{execution, operator, posts, Mcp, Setup, ALICE_TOKEN, BILLING_TOKEN};

/// A line an agent would like the operator to read, and an escape that hides what follows.
const FORGED_LINE: &str = "arguments    {\"amount\":1,\"to\":\"acme-ltd\"}";
const HIDE: &str = "\u{1b}[8m";

fn hostile(prefix: &str) -> String {
    format!("{prefix}\n{FORGED_LINE}{HIDE}\u{202e}")
}

/// Terminal output that neither obeys nor forges: no ESC, no bidi override, no line that
/// starts with the forged text, and the escaped form where the string was.
fn assert_safe(verb: &str, out: &str) {
    assert!(
        !out.contains('\u{1b}') && !out.contains('\u{202e}'),
        "{verb}: a raw control or bidi character reached the terminal:\n{out:?}"
    );
    assert!(
        !out.lines().any(|l| l.trim_start().starts_with(FORGED_LINE)),
        "{verb}: a forged line stands on its own:\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_keys_with_control_characters_are_refused_at_the_front() {
    let s = Setup::start("term-keys", approval_config).await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let bad = hostile("k1");
    for (extra, what) in [
        (json!({"_meta": {"io.postern/run": bad}}), "run id"),
        (
            json!({"_meta": {"io.postern/idempotency-key": bad}}),
            "operation key",
        ),
        (json!({"idempotencyKey": bad}), "operation key"),
        (
            json!({"_meta": {"io.postern/reissue-key": bad}}),
            "re-issue key",
        ),
        (
            json!({"_meta": {"io.postern/intent-scope": bad}}),
            "intent scope",
        ),
    ] {
        let response = mcp
            .call(
                "pay_invoice",
                json!({"customer": "k", "amount": 1}),
                extra.clone(),
            )
            .await;
        let error = &response["error"];
        assert_eq!(error["code"], -32602, "{extra}: {response}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(what) && message.contains("U+000A"),
            "{extra}: {message}"
        );
    }
    assert_eq!(posts(&s.target.state), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_client_name_and_reason_are_shown_escaped_by_every_verb() {
    let s = Setup::start("term-show", approval_config).await;
    let client = hostile("evil-agent");
    let mcp = Mcp::connect_as(&s.served.url, BILLING_TOKEN, &client).await;
    let first = mcp
        .call(
            "pay_invoice",
            json!({"customer": "term-co", "amount": 99999}),
            json!({}),
        )
        .await;
    let id = execution(&first)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let run = mcp.run_id();

    // The prompt an operator answers, on a real terminal: the call as it is, nothing forged.
    let prompt = approve_on_a_terminal(&s, &id, "n\n");
    assert!(prompt.contains("approve this call? [y/N]"), "{prompt}");
    assert!(
        prompt.contains("term-co") && prompt.contains("99999"),
        "{prompt}"
    );
    assert_safe("approvals approve (pty)", &prompt);
    assert_eq!(posts(&s.target.state), 0, "answered n: nothing sent");

    // A second operator's reason cannot spoof the next operator's screen either.
    let reason = hostile("looks fine");
    let (code, out, err) = operator(&s.served, &["approvals", "deny", &id, "--reason", &reason]);
    assert_eq!(code, 0, "{err}");
    assert_safe("approvals deny", &out);

    let store = format!("sqlite://{}", s.dir.0.join("ledger.db").display());
    let mut shown = Vec::new();
    for args in [
        vec!["approvals", "show", &id],
        vec!["approvals", "list"],
        vec!["sessions", "list"],
        vec!["sessions", "show", &run],
    ] {
        let (code, out, err) = operator(&s.served, &args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert_safe(&args.join(" "), &out);
        shown.push(out);
    }
    for args in [["show", id.as_str()], ["trace", id.as_str()]] {
        let out = Command::new(env!("CARGO_BIN_EXE_postern"))
            .arg("activity")
            .args(args)
            .args(["--store", &store])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = String::from_utf8(out.stdout).unwrap();
        assert_safe(&format!("activity {}", args[0]), &out);
        shown.push(out);
    }
    let all = shown.join("\n");
    // The strings are there, escaped: the operator sees what the agent sent.
    assert!(all.contains("evil-agent\\u{a}arguments"), "{all}");
    assert!(all.contains("looks fine\\u{a}arguments"), "{all}");
}

/// `postern approvals approve ID` on a pseudo-terminal (`script`), answering `answer` to its
/// prompt; everything the terminal received.
fn approve_on_a_terminal(s: &Setup, id: &str, answer: &str) -> String {
    use std::io::Write;
    let command = format!(
        "{} approvals approve {id} --gateway {}",
        env!("CARGO_BIN_EXE_postern"),
        s.served.url
    );
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("POSTERN_OPERATOR_TOKEN", ALICE_TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux runs the CLI on a pty");
    // The prompt reads a line once it is shown; the pty keeps the answer until then.
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answer.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
}

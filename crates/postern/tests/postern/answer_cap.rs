//! Issue 49: an agent recovered 23 of a credential's 25 characters from an answer cut at the
//! 256 KiB cap (an honest echo API that writes `+` as `\u002B`, and padding that put the echoed
//! `Authorization` header across the cap), and the whole token from a target that echoes the
//! request base64-encoded. A real `postern serve` in front of the demo target's echo endpoints
//! (the target checks the token, then says it back), logging at trace level: no 4 characters of
//! the token in a row reach the agent's result, the ledger (`activity show`), the audit export
//! or the gateway's log — as written, behind JSON escapes, or base64-encoded.

use std::path::PathBuf;
use std::process::{Child, Command};

use postern_demo::echo::system_text_json_escape;
use postern_demo::target::InvoiceApi;
use postern_testkit::leaks::{base64_decodings, leaked_windows};
use serde_json::{json, Value};

use crate::harness::{
    activity, config, execution_id, prepare, serve_logging_to, write_private, Dir, Mcp,
    BILLING_TOKEN,
};

/// Nothing of it is a word Postern writes; `+` is what System.Text.Json escapes.
const TOKEN: &str = "Qz7Vk2Xw9Pj4Rm8Ln+/=12";
/// An HTTP tool's `max_response_bytes`.
const CAP: usize = 256 * 1024;

struct Gateway {
    child: Child,
    url: String,
    dir: Dir,
    log: PathBuf,
}

impl Gateway {
    /// `postern serve` at trace level (its log kept) with the two echo tools on the token.
    fn start(tag: &str, target: &str) -> Gateway {
        let tool = |name: &str, path: &str| {
            format!(
                r#"
[[tool]]
name = "{name}"
class = "read_only"
input_schema = {{ type = "object", required = ["pad"], properties = {{ pad = {{ type = "string" }} }} }}
http = {{ method = "POST", url = "{target}{path}", credential = "api" }}
"#
            )
        };
        let text = format!(
            "{}\n[credential.api]\nkind = \"bearer\"\nsecret = {{ file = \"api.token\" }}\n{}{}",
            config(target).replace("max_body_bytes = 65536", "max_body_bytes = 1048576"),
            tool("echo_escaped", "/echo/escaped"),
            tool("echo_base64", "/echo/base64?pad={pad}"),
        );
        let dir = Dir::new(tag);
        prepare(&dir.0, &text);
        write_private(&dir.0.join("api.token"), TOKEN);
        let log = dir.0.join("stderr.log");
        let (child, url) = serve_logging_to(&dir.0, &log);
        Gateway {
            child,
            url,
            dir,
            log,
        }
    }

    /// Stops the gateway; every place the calls may have reached, as text: each execution as
    /// `activity show` prints it, the audit export, the gateway's log.
    fn stop_and_read(mut self, ids: &[String]) -> Vec<(String, String)> {
        Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(self.child.wait().unwrap().success());
        let mut places: Vec<(String, String)> = ids
            .iter()
            .map(|id| {
                let shown = activity(&self.dir.0, &["show", id]);
                (format!("activity show {id}"), shown.to_string())
            })
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_postern"))
            .current_dir(&self.dir.0)
            .args([
                "audit",
                "export",
                "-c",
                "postern.toml",
                "--out",
                "export.jsonl",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let export = std::fs::read_to_string(self.dir.0.join("export.jsonl")).unwrap();
        assert!(export.lines().count() > ids.len(), "{export}");
        places.push(("audit export".into(), export));
        let log = std::fs::read_to_string(&self.log).unwrap();
        assert!(log.contains("\"level\":\"DEBUG\""), "no debug lines: {log}");
        places.push(("the gateway's log".into(), log));
        places
    }
}

/// What of the token `text` gives away: 4 characters in a row of it, as written or behind
/// JSON escapes (decoded once or twice), or (`base64`) 4 bytes of it in anything its base64
/// decodes to.
fn leaks(text: &str, base64: bool) -> Vec<String> {
    let mut found = leaked_windows(TOKEN, "", text);
    if !base64 {
        return found;
    }
    for reading in postern_testkit::leaks::readings(text) {
        for decoded in base64_decodings(&reading) {
            for w in TOKEN.as_bytes().windows(4) {
                if decoded.windows(4).any(|d| d == w) {
                    found.push(format!("base64 of {}", String::from_utf8_lossy(w)));
                }
            }
        }
    }
    found
}

fn response(r: &Value) -> &str {
    r["result"]["structuredContent"]["response"]
        .as_str()
        .unwrap_or_else(|| panic!("not a text answer: {r}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_across_the_cap_behind_escapes_never_comes_back_in_part() {
    let target = InvoiceApi::start_with_token(TOKEN).await.unwrap();
    let gateway = Gateway::start("answer-cap-escaped", &target.url(""));
    let mcp = Mcp::connect(&gateway.url, BILLING_TOKEN).await;
    // The echo's bytes before the token, for a pad of `n` letters (letters are not escaped).
    let before = |n: usize| {
        let body = json!({ "pad": "a".repeat(n) }).to_string();
        format!(
            "{{\"body\":\"{}\",\"authorization\":\"Bearer ",
            system_text_json_escape(&body)
        )
        .len()
    };
    let written = system_text_json_escape(TOKEN);
    assert!(written.contains("\\u002B"), "{written}");
    let mut ids = Vec::new();
    // The attacker bisects for the pad that cuts the token; every position it could land on,
    // from inside `Bearer ` to past the token's end, is tried here.
    for into in -8..=(written.len() as isize + 2) {
        let pad = (CAP as isize - before(0) as isize - into) as usize;
        let r = mcp
            .call("echo_escaped", json!({ "pad": "a".repeat(pad) }), json!({}))
            .await;
        ids.push(execution_id(&r));
        // Cut at the cap, or whole where the marker is shorter than what it replaced.
        let answer = &r["result"]["structuredContent"]["response"];
        let text = answer
            .as_str()
            .map_or_else(|| answer.to_string(), str::to_string);
        assert!(
            text.len() <= CAP && text.contains("\"body\":"),
            "{into}: {r}"
        );
        let found = leaks(&r.to_string(), false);
        assert!(
            found.is_empty(),
            "cap {into} bytes into the token: {found:?}"
        );
    }
    // The target saw the token on every call and answered it (it refuses any other).
    let seen = target.state.requests();
    assert_eq!(seen.len(), ids.len());
    assert!(seen.iter().all(|s| s.has_authorization));
    for (place, text) in gateway.stop_and_read(&ids) {
        let found = leaks(&text, false);
        assert!(found.is_empty(), "{place}: {found:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_echoed_in_base64_never_gives_the_token_away_at_any_alignment() {
    let target = InvoiceApi::start_with_token(TOKEN).await.unwrap();
    let gateway = Gateway::start("answer-cap-base64", &target.url(""));
    let mcp = Mcp::connect(&gateway.url, BILLING_TOKEN).await;
    let mut ids = Vec::new();
    let mut alignments = std::collections::BTreeSet::new();
    for pad in 0..6 {
        let r = mcp
            .call("echo_base64", json!({ "pad": "a".repeat(pad) }), json!({}))
            .await;
        ids.push(execution_id(&r));
        let answer = response(&r);
        // Where the token stood in the encoded request: decode what comes before the marker.
        let head = &answer[..answer.find("[REDACTED]").expect(answer)];
        let decoded = &base64_decodings(&head[..head.len() / 4 * 4])[0];
        let at = String::from_utf8_lossy(decoded)
            .find("authorization: ")
            .unwrap_or_else(|| panic!("{answer}: {}", String::from_utf8_lossy(decoded)))
            + "authorization: Bearer ".len();
        alignments.insert(at % 3);
        let found = leaks(&r.to_string(), true);
        assert!(found.is_empty(), "pad {pad}: {found:?}");
    }
    assert_eq!(alignments.len(), 3, "{alignments:?}");
    for (place, text) in gateway.stop_and_read(&ids) {
        let found = leaks(&text, true);
        assert!(found.is_empty(), "{place}: {found:?}");
    }
}

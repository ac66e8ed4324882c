//! Issue 22 end to end: `postern connect` under a foreign agent (the official Python SDK on
//! stdio, `tests/interop/python_stdio.py`) in front of a real `postern serve` and invoice API.
//! A re-issue of one agent request finds the execution its first attempt reached whatever the
//! tool's match window; separate agent requests stay separate; an agent's operation key is
//! kept; the bridge's annotation says only what the bridge saw; and no refused command line
//! prints the token it was given.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use postern_demo::target::{InvoiceApi, InvoiceApiHandle};
use postern_ledger::{ExecutionSummary, Ledger, LedgerOptions, ListFilter};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::foreign::{output, repo_root};
use crate::harness::{config, posts, Dir, Served, BILLING_TOKEN};
use crate::interop::{python3, require_sdk};

/// The harness's tools plus two irreversible ones whose match windows end before a re-issue
/// can arrive (1 s, shorter than the bridge's 3 s attempt timeout) or never match at all.
fn wire_config(target: &str) -> String {
    let mut text = config(target);
    for (name, window) in [("wire_short_window", "1s"), ("wire_no_window", "0s")] {
        text.push_str(&format!(
            r#"
[[tool]]
name = "{name}"
description = "Irreversible, window {window}"
class = "irreversible"
match_window = "{window}"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}
"#
        ));
    }
    text
}

async fn setup(tag: &str) -> (InvoiceApiHandle, Dir, Served) {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new(tag);
    let served = Served::start(&dir.0, &wire_config(&format!("http://{}", target.addr)));
    (target, dir, served)
}

#[derive(Default)]
struct ProxyStats {
    /// `tools/call` requests that went through (client→gateway).
    calls: AtomicUsize,
    /// Occurrences of the bridge's re-issue key name in client→gateway bytes.
    reissue_keyed: AtomicUsize,
    /// Set once a `tools/call` answer has been withheld.
    held: AtomicBool,
}

/// A TCP proxy between `postern connect` and `postern serve` that forwards everything, except
/// (when `hold`) on the first connection that carries a `tools/call`: that request reaches the
/// gateway, which performs the call, but the gateway's answer is read and thrown away and the
/// bridge's side is kept open and silent. Holding, not cutting: a cut would let rmcp resume the
/// answer stream with `Last-Event-ID`, and the case under test is an answer that never comes.
struct FaultProxy {
    url: String,
    stats: Arc<ProxyStats>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn fault_proxy(served: &Served, hold: bool) -> FaultProxy {
    let upstream: SocketAddr = served.addr().parse().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let stats = Arc::new(ProxyStats::default());
    let st = stats.clone();
    let accept = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let st = st.clone();
            // Connection tasks outlive the accept loop: a held connection stays held until the
            // test's runtime ends.
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    relay(client, server, hold, &st).await;
                }
            });
        }
    });
    FaultProxy { url, stats, accept }
}

fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

async fn relay(client: TcpStream, server: TcpStream, hold: bool, st: &ProxyStats) {
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (mut up, mut down) = (vec![0u8; 16384], vec![0u8; 16384]);
    // Everything the client sent on this connection, so a name split across reads is found.
    let mut sent = Vec::new();
    let (mut calls, mut keyed) = (0, 0);
    let mut holding = false;
    let mut server_open = true;
    loop {
        tokio::select! {
            r = cr.read(&mut up) => {
                let n = match r { Ok(0) | Err(_) => return, Ok(n) => n };
                sent.extend_from_slice(&up[..n]);
                let now = occurrences(&sent, b"\"tools/call\"");
                st.calls.fetch_add(now - calls, Ordering::Relaxed);
                calls = now;
                let now = occurrences(&sent, b"io.postern/reissue-key");
                st.reissue_keyed.fetch_add(now - keyed, Ordering::Relaxed);
                keyed = now;
                // HTTP/1.1 without pipelining: earlier answers on this connection are complete,
                // so from here on the gateway's bytes are this call's answer.
                if hold && calls > 0 && !holding && !st.held.swap(true, Ordering::Relaxed) {
                    holding = true;
                }
                if sw.write_all(&up[..n]).await.is_err() { return; }
            }
            r = sr.read(&mut down), if server_open => {
                let n = r.unwrap_or(0);
                if n == 0 {
                    if !holding { return; }
                    // The gateway is done; the bridge keeps waiting on an open, silent socket.
                    server_open = false;
                } else if !holding && cw.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Runs `python_stdio.py`: the SDK starts `postern connect URL CONNECT_ARGS` and calls `tool`
/// `calls` times. Returns one JSON line per call, and the stderr of the script and the bridge.
async fn sdk(
    url: &str,
    tool: &str,
    arguments: Value,
    calls: usize,
    key: Option<&str>,
    connect_args: &[&str],
) -> (Vec<Value>, String) {
    let script = repo_root().join("tests/interop/python_stdio.py");
    let calls = calls.to_string();
    let arguments = arguments.to_string();
    let mut args = vec![script.to_str().unwrap(), "--calls", &calls];
    if let Some(key) = key {
        args.extend(["--idempotency-key", key]);
    }
    args.extend([env!("CARGO_BIN_EXE_postern"), url, tool, &arguments, "--"]);
    args.extend(connect_args);
    let mut cmd = python3(&args);
    cmd.env("POSTERN_TOKEN", BILLING_TOKEN);
    // The invoice API and the proxy run on this runtime: the client runs beside them.
    let out = output(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "python_stdio.py {tool} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(!stdout.contains(BILLING_TOKEN) && !stderr.contains(BILLING_TOKEN));
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (lines, stderr)
}

/// Every execution in the ledger of `tool`.
async fn executions(served: &Served, tool: &str) -> Vec<ExecutionSummary> {
    let (ledger, _) = Ledger::open(&served.store(), LedgerOptions::default())
        .await
        .unwrap();
    let filter = ListFilter {
        limit: 1000,
        ..Default::default()
    };
    let all = ledger.read().list(&filter).await.unwrap();
    all.into_iter().filter(|e| e.tool == tool).collect()
}

/// The `reissue_keys` rows' execution ids: what the gateway matched the bridge's keys to.
async fn reissue_rows(served: &Served) -> Vec<String> {
    use sqlx::Connection;
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(served.dir.join("ledger.db"))
        .read_only(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    sqlx::query_scalar("SELECT execution_id FROM reissue_keys")
        .fetch_all(&mut conn)
        .await
        .unwrap()
}

fn completed_id(line: &Value) -> String {
    assert_eq!(line["isError"], false, "{line}");
    let ex = &line["structuredContent"]["execution"];
    assert_eq!(ex["state"], "completed", "{line}");
    ex["execution_id"].as_str().unwrap().to_string()
}

/// One agent request whose first answer is withheld; its re-issue reaches the gateway after
/// the tool's match window: the same execution answers, and the bridge says what it saw.
async fn one_request_past_the_window(tool: &str) {
    require_sdk().await;
    let (target, _dir, served) = setup(tool).await;
    let proxy = fault_proxy(&served, true).await;
    let customer = format!("{tool}-co");
    let args = [
        "--attempt-timeout",
        "3s",
        "--recovery-time",
        "20s",
        "--verbose",
    ];
    let started = std::time::Instant::now();
    let (lines, stderr) = sdk(
        &proxy.url,
        tool,
        json!({"customer": customer, "amount": 42}),
        1,
        None,
        &args,
    )
    .await;
    let st = &proxy.stats;
    assert!(st.held.load(Ordering::Relaxed), "no answer was withheld");
    assert_eq!(st.calls.load(Ordering::Relaxed), 2, "{stderr}");
    assert_eq!(
        st.reissue_keyed.load(Ordering::Relaxed),
        2,
        "both attempts carry the re-issue key"
    );
    assert!(
        started.elapsed() > Duration::from_secs(3),
        "past the window"
    );
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    let id = completed_id(line);
    let bridge = &line["structuredContent"]["bridge"];
    assert_eq!(bridge["attempts"], 2, "{line}\n{stderr}");
    assert_eq!(bridge["reissued"], true, "{line}");
    let observed: Vec<&str> = bridge["observed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert_eq!(observed.len(), 2, "{line}");
    assert!(
        observed[0].starts_with("attempt 1: no answer")
            && observed[0].contains("the request had left the bridge"),
        "{}",
        observed[0]
    );
    assert!(
        observed[1].starts_with("attempt 2: the gateway answered")
            && observed[1].contains(&format!("naming execution {id}")),
        "{}",
        observed[1]
    );
    assert_eq!(bridge["executions_named"], json!([id]), "{line}");
    let texts = line["texts"].to_string();
    assert!(
        texts.contains("sent this call 2 times"),
        "the note is a text block too: {texts}"
    );
    for claim in ["acted on none", "had acted"] {
        assert!(!line.to_string().contains(claim), "{claim:?} in {line}");
    }

    assert_eq!(target.state.count_for(&customer), 1, "one invoice");
    assert_eq!(posts(&target.state), 1, "the target saw one request");
    let recorded = executions(&served, tool).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].id.to_string(), id);
    assert_eq!(reissue_rows(&served).await, vec![id]);
}

/// Window 1 s, re-issue after the 3 s attempt timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reissue_past_a_short_window_is_one_invoice() {
    one_request_past_the_window("wire_short_window").await;
}

/// Window "0s": identical arguments never match by fingerprint, a re-issue still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reissue_with_a_zero_window_is_one_invoice() {
    one_request_past_the_window("wire_no_window").await;
}

/// Two agent requests with identical arguments are two intents when the window says so, and one
/// when it does not: the bridge's key never merges separate requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_agent_requests_stay_separate_with_a_zero_window() {
    require_sdk().await;
    let (target, _dir, served) = setup("bridge-separate").await;
    let proxy = fault_proxy(&served, false).await;

    let (lines, stderr) = sdk(
        &proxy.url,
        "wire_no_window",
        json!({"customer": "twice-co", "amount": 5}),
        2,
        None,
        &[],
    )
    .await;
    assert_eq!(lines.len(), 2, "{lines:?}\n{stderr}");
    let ids: Vec<String> = lines.iter().map(completed_id).collect();
    assert_ne!(ids[0], ids[1], "{lines:?}");
    for line in &lines {
        assert_eq!(
            line["structuredContent"]["execution"]["attempt"], "new",
            "{line}"
        );
        assert!(line["structuredContent"].get("bridge").is_none(), "{line}");
    }
    assert_eq!(target.state.count_for("twice-co"), 2);
    assert_eq!(executions(&served, "wire_no_window").await.len(), 2);
    let st = &proxy.stats;
    assert_eq!(st.calls.load(Ordering::Relaxed), 2);
    assert_eq!(st.reissue_keyed.load(Ordering::Relaxed), 2, "one key each");
    let mut rows = reissue_rows(&served).await;
    rows.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(rows, want, "each request's key names its own execution");

    // A 10 min window: the second identical request is the same intent.
    let (lines, stderr) = sdk(
        &served.url,
        "create_invoice",
        json!({"customer": "same-co", "amount": 5}),
        2,
        None,
        &[],
    )
    .await;
    assert_eq!(lines.len(), 2, "{lines:?}\n{stderr}");
    let ids: Vec<String> = lines.iter().map(completed_id).collect();
    assert_eq!(ids[0], ids[1], "{lines:?}");
    assert_eq!(lines[0]["structuredContent"]["execution"]["attempt"], "new");
    assert_eq!(
        lines[1]["structuredContent"]["execution"]["attempt"],
        "recovered"
    );
    assert_eq!(target.state.count_for("same-co"), 1);
    assert_eq!(executions(&served, "create_invoice").await.len(), 1);
}

/// `postern connect` with raw JSON-RPC lines on its stdin, as a desktop client writes them.
async fn raw_calls(url: &str, calls: &[String]) -> Vec<Value> {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["connect", url])
        .env("POSTERN_TOKEN", BILLING_TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"lines","version":"1"}}}"#;
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let mut answers = Vec::new();
    for (i, line) in [init, initialized]
        .into_iter()
        .chain(calls.iter().map(String::as_str))
        .enumerate()
    {
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
        if i == 1 {
            continue; // a notification has no answer
        }
        let text = tokio::time::timeout(Duration::from_secs(20), out.next_line())
            .await
            .expect("an answer within 20 s")
            .unwrap()
            .expect("the bridge closed its output");
        answers.push(serde_json::from_str(&text).unwrap());
    }
    answers.split_off(1)
}

/// An agent's operation key (in `_meta` from the Python SDK, or `params.idempotencyKey` on a
/// raw line) reaches the gateway as the execution's key; the bridge adds no re-issue key, and
/// the key, not the 0 s window, decides that a repeat is the same action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_operation_key_is_kept() {
    require_sdk().await;
    let (target, _dir, served) = setup("bridge-key").await;
    let proxy = fault_proxy(&served, false).await;

    let (lines, stderr) = sdk(
        &proxy.url,
        "wire_no_window",
        json!({"customer": "meta-co", "amount": 9}),
        2,
        Some("order-meta-1"),
        &[],
    )
    .await;
    assert_eq!(lines.len(), 2, "{lines:?}\n{stderr}");
    let meta_id = completed_id(&lines[0]);
    assert_eq!(completed_id(&lines[1]), meta_id, "{lines:?}");
    assert!(lines[0]["structuredContent"].get("bridge").is_none());

    let call = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"wire_no_window","arguments":{{"customer":"raw-co","amount":9}},"idempotencyKey":"order-raw-1"}}}}"#
        )
    };
    let answers = raw_calls(&proxy.url, &[call(1), call(2)]).await;
    let raw_id = answers[0]["result"]["structuredContent"]["execution"]["execution_id"].clone();
    assert!(raw_id.is_string(), "{answers:?}");
    assert_eq!(
        answers[1]["result"]["structuredContent"]["execution"]["execution_id"], raw_id,
        "{answers:?}"
    );

    let st = &proxy.stats;
    assert_eq!(st.calls.load(Ordering::Relaxed), 4);
    assert_eq!(
        st.reissue_keyed.load(Ordering::Relaxed),
        0,
        "a keyed request needs no re-issue key"
    );
    let recorded = executions(&served, "wire_no_window").await;
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    for (id, key) in [(json!(meta_id), "order-meta-1"), (raw_id, "order-raw-1")] {
        let e = recorded
            .iter()
            .find(|e| json!(e.id.to_string()) == id)
            .unwrap_or_else(|| panic!("{id} not in {recorded:?}"));
        assert_eq!(e.operation_key.as_deref(), Some(key), "{e:?}");
    }
    assert!(reissue_rows(&served).await.is_empty());
    assert_eq!(target.state.count_for("meta-co"), 1);
    assert_eq!(target.state.count_for("raw-co"), 1);
}

const SECRET: &str = "SECRETTOKEN123456";

/// Every way a token can be put where it does not belong on `postern connect`'s command line is
/// refused, with a reason, and the token appears in neither output stream.
#[test]
fn no_refused_invocation_prints_a_token() {
    let url = "http://127.0.0.1:9/mcp";
    let token_like = format!("{SECRET}abcdef");
    let in_userinfo = format!("http://user:{SECRET}@127.0.0.1:9/mcp");
    let as_user = format!("http://{SECRET}@127.0.0.1:9/mcp");
    let in_query = format!("http://127.0.0.1:9/mcp?access_token={SECRET}");
    let in_fragment = format!("http://127.0.0.1:9/mcp#{SECRET}");
    let unparsable = format!("http://{SECRET}@[bad/mcp");
    let cases: [(&[&str], bool, &str); 10] = [
        // The token pasted after the URL, or in its place.
        (&[url, SECRET], true, "unexpected argument"),
        (&[SECRET], true, "invalid URL"),
        (&[&in_userinfo], true, "refusing credentials in the URL"),
        (&[&as_user], true, "refusing credentials in the URL"),
        (&[&in_query], true, "refusing a query or fragment"),
        (&[&in_fragment], true, "refusing a query or fragment"),
        (&[&unparsable], true, "invalid URL"),
        (&[url, "--token-env", &token_like], false, "is not set"),
        (
            &[url, "--token-env", "tok-SECRET.123"],
            true,
            "not a variable name",
        ),
        (
            &[url, "--token", SECRET],
            true,
            "refusing a token on the command line",
        ),
    ];
    for (args, with_token, says) in cases {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_postern"));
        cmd.arg("connect")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null());
        if with_token {
            // A refusal must not depend on the token being missing.
            cmd.env("POSTERN_TOKEN", BILLING_TOKEN);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        for (name, text) in [("stderr", &stderr), ("stdout", &stdout)] {
            assert!(!text.contains(SECRET), "{args:?}: token in {name}: {text}");
            assert!(!text.contains("tok-SECRET"), "{args:?}: {name}: {text}");
            assert!(!text.contains(BILLING_TOKEN), "{args:?}: {name}: {text}");
        }
    }
}

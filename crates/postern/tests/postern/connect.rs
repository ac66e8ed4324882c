//! `postern connect` end to end: a local agent (rmcp's client, or raw JSON-RPC lines) drives the
//! bridge over its stdin/stdout; the bridge talks to a real `postern serve` — through a TCP proxy
//! that cuts connections at random — in front of the invoice API that counts effects.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postern_core::State;
use postern_demo::target::{InvoiceApi, InvoiceApiHandle, Mode};
use postern_ledger::{Ledger, LedgerOptions, ListFilter};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

use crate::harness::{config, Dir, Served, BILLING_TOKEN};

/// splitmix64: a seeded, dependency-free source of "random" cut points.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default)]
struct ProxyStats {
    connections: AtomicUsize,
    /// Connections chosen to be cut (the limit may lie beyond what they carry).
    armed: AtomicUsize,
    /// Connections actually cut: client→gateway, gateway→client.
    cut_up: AtomicUsize,
    cut_down: AtomicUsize,
    /// `GET`s with `Last-Event-ID` (rmcp resuming a broken answer stream), and how many of
    /// them carried a result back.
    resumes: AtomicUsize,
    resumed_results: AtomicUsize,
    /// Cuts of connections that carried a `tools/call` POST.
    cut_calls: AtomicUsize,
}

/// A TCP proxy on 127.0.0.1 that cuts a seeded random share of its connections after a random
/// number of bytes in one direction (both sockets are then closed).
struct Proxy {
    url: String,
    stats: Arc<ProxyStats>,
    upstream: Arc<Mutex<SocketAddr>>,
}

impl Proxy {
    /// New connections go to `to` (a restarted gateway on another port).
    fn set_upstream(&self, to: SocketAddr) {
        *self.upstream.lock().unwrap() = to;
    }
}

fn addr_of(served: &Served) -> SocketAddr {
    served
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap()
}

async fn proxy(upstream: SocketAddr, seed: u64, percent: u64) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(ProxyStats::default());
    let rng = Arc::new(Mutex::new(Rng(seed)));
    let st = stats.clone();
    let upstream = Arc::new(Mutex::new(upstream));
    let to = upstream.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            st.connections.fetch_add(1, Ordering::Relaxed);
            let cut = {
                let mut r = rng.lock().unwrap();
                if r.below(100) < percent {
                    // Measured: a call's request is ~490 bytes; its answer ~235 (headers and the
                    // priming event) then ~680 (the result). Cut anywhere in them, twice as
                    // often on the way back (the gateway acted, the answer is lost).
                    let up = r.below(3) == 0;
                    let limit = r.below(if up { 480 } else { 900 }) as usize;
                    Some((up, limit))
                } else {
                    None
                }
            };
            if cut.is_some() {
                st.armed.fetch_add(1, Ordering::Relaxed);
            }
            let st = st.clone();
            let upstream = *to.lock().unwrap();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                pipe(client, server, cut, &st).await;
            });
        }
    });
    Proxy {
        url: format!("http://{addr}/mcp"),
        stats,
        upstream,
    }
}

async fn pipe(client: TcpStream, server: TcpStream, cut: Option<(bool, usize)>, st: &ProxyStats) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (mut up_left, mut down_left) = match cut {
        Some((true, n)) => (n, usize::MAX),
        Some((false, n)) => (usize::MAX, n),
        None => (usize::MAX, usize::MAX),
    };
    let mut up = vec![0u8; 16384];
    let mut down = vec![0u8; 16384];
    let mut resume: Option<bool> = None;
    let mut is_call = false;
    let cut_call = |is_call: bool| {
        if is_call {
            st.cut_calls.fetch_add(1, Ordering::Relaxed);
        }
    };
    loop {
        tokio::select! {
            r = cr.read(&mut up) => {
                let n = match r { Ok(0) | Err(_) => return, Ok(n) => n };
                if resume.is_none() {
                    let head = String::from_utf8_lossy(&up[..n]).to_ascii_lowercase();
                    let is_resume = head.starts_with("get ") && head.contains("last-event-id:");
                    if is_resume {
                        st.resumes.fetch_add(1, Ordering::Relaxed);
                    }
                    is_call = head.starts_with("post ") && head.contains("\"tools/call\"");
                    resume = Some(is_resume);
                }
                let k = n.min(up_left);
                if sw.write_all(&up[..k]).await.is_err() { return; }
                up_left -= k;
                if up_left == 0 {
                    st.cut_up.fetch_add(1, Ordering::Relaxed);
                    cut_call(is_call);
                    return;
                }
            }
            r = sr.read(&mut down) => {
                let n = match r { Ok(0) | Err(_) => return, Ok(n) => n };
                if resume == Some(true) && contains(&down[..n], b"\"result\"") {
                    st.resumed_results.fetch_add(1, Ordering::Relaxed);
                    resume = Some(false);
                }
                let k = n.min(down_left);
                if cw.write_all(&down[..k]).await.is_err() { return; }
                down_left -= k;
                if down_left == 0 {
                    st.cut_down.fetch_add(1, Ordering::Relaxed);
                    cut_call(is_call);
                    return;
                }
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn setup(tag: &str, edit: impl Fn(String) -> String) -> (InvoiceApiHandle, Dir, Served) {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new(tag);
    let text = edit(config(&format!("http://{}", target.addr)));
    let served = Served::start(&dir.0, &text);
    (target, dir, served)
}

fn bridge(url: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_postern"))
        .arg("connect")
        .arg(url)
        .args(extra)
        .env("POSTERN_TOKEN", BILLING_TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

fn seed() -> u64 {
    std::env::var("POSTERN_PROXY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0005)
}

/// 200 calls with distinct customers through a proxy that cuts 30% of all connections at
/// random points: every call gets a definitive result, and the target holds exactly one invoice
/// per customer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_calls_through_a_cutting_proxy_make_two_hundred_invoices() {
    const CALLS: usize = 200;
    let (target, _dir, served) = setup("connect-cut", |t| t).await;
    let seed = seed();
    let proxy = proxy(addr_of(&served), seed, 30).await;
    let mut child = bridge(
        &proxy.url,
        &["--attempt-timeout", "5s", "--recovery-time", "45s"],
    );
    let io = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let agent = ().serve(io).await.unwrap();
    let tools = agent.list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "create_invoice"),
        "{tools:?}"
    );

    let started = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(8));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..CALLS {
        let peer = agent.peer().clone();
        let limit = limit.clone();
        calls.spawn(async move {
            let _permit = limit.acquire().await.unwrap();
            let customer = format!("cust-{i:03}");
            let args = json!({"customer": customer, "amount": 100 + i})
                .as_object()
                .unwrap()
                .clone();
            let result = peer
                .call_tool(CallToolRequestParams::new("create_invoice").with_arguments(args))
                .await;
            (customer, result)
        });
    }
    let mut attempts: HashMap<String, usize> = HashMap::new();
    let mut reissued = 0;
    let mut done = 0;
    while let Some(joined) = calls.join_next().await {
        let (customer, result) = joined.unwrap();
        let result = result.unwrap_or_else(|e| panic!("{customer}: no result: {e}"));
        let s = result.structured_content.clone().unwrap_or_default();
        assert_eq!(result.is_error, Some(false), "{customer}: {s}");
        assert_eq!(s["execution"]["state"], "completed", "{customer}: {s}");
        assert_eq!(s["response"]["customer"], customer.as_str(), "{s}");
        *attempts
            .entry(s["execution"]["attempt"].as_str().unwrap().to_string())
            .or_default() += 1;
        if s["bridge"]["reissued"] == true {
            reissued += 1;
        }
        done += 1;
    }
    let elapsed = started.elapsed();
    assert_eq!(done, CALLS);

    let invoices = target.state.invoices();
    let mut per_customer: HashMap<&str, usize> = HashMap::new();
    for inv in &invoices {
        *per_customer.entry(inv.customer.as_str()).or_default() += 1;
    }
    let (ledger, _) = Ledger::open(&served.store(), LedgerOptions::default())
        .await
        .unwrap();
    let executions = ledger
        .read()
        .list(&ListFilter {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    let st = &proxy.stats;
    eprintln!(
        "connect under cuts (seed {seed:#x}): {CALLS} calls in {elapsed:?}; proxy: {} connections, \
         {} armed, {} cut client->gateway, {} cut gateway->client ({} of them tools/call requests); {} resumes with Last-Event-ID \
         ({} brought the result); {reissued} calls re-issued by the bridge; gateway attempts \
         {attempts:?}; {} invoices, {} executions (cancelled before dispatch: {})",
        st.connections.load(Ordering::Relaxed),
        st.armed.load(Ordering::Relaxed),
        st.cut_up.load(Ordering::Relaxed),
        st.cut_down.load(Ordering::Relaxed),
        st.cut_calls.load(Ordering::Relaxed),
        st.resumes.load(Ordering::Relaxed),
        st.resumed_results.load(Ordering::Relaxed),
        invoices.len(),
        executions.len(),
        executions
            .iter()
            .filter(|e| e.lifecycle.state == State::Cancelled)
            .count(),
    );
    assert_eq!(invoices.len(), CALLS, "exactly one invoice per call");
    assert_eq!(per_customer.len(), CALLS);
    assert!(per_customer.values().all(|&n| n == 1));
    // One sent execution per call. A call whose connection died before its request left may
    // leave an execution with nothing sent — `cancelled` (before dispatch) or `failed` (after
    // dispatch was recorded, before the first byte); its re-issue is a new one.
    let (sent, other): (Vec<_>, Vec<_>) = executions
        .iter()
        .partition(|e| e.first_dispatched_at.is_some() && e.lifecycle.state != State::Failed);
    assert_eq!(sent.len(), CALLS, "one sent execution per call");
    for e in &other {
        assert!(
            matches!(e.lifecycle.state, State::Cancelled | State::Failed),
            "{e:?}"
        );
    }
    let cuts = st.cut_up.load(Ordering::Relaxed) + st.cut_down.load(Ordering::Relaxed);
    assert!(
        cuts >= CALLS / 10,
        "the proxy cut too little to mean anything: {cuts}"
    );
    assert!(reissued > 0, "no call needed a re-issue");
    agent.cancel().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
}

/// Raw JSON-RPC lines, as a desktop client writes them.
pub(crate) struct Lines {
    pub child: Child,
    out: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Lines {
    async fn start(url: &str, extra: &[&str]) -> Lines {
        Lines::initialize(bridge(url, extra)).await
    }

    /// Initializes the MCP session with a bridge already started (stdin and stdout piped).
    pub(crate) async fn initialize(mut child: Child) -> Lines {
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut l = Lines { child, out };
        let init = l
            .ask(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"lines","version":"1"}}}"#)
            .await;
        assert_eq!(
            init["result"]["serverInfo"]["name"], "postern-connect",
            "{init}"
        );
        l.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        l
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Sends a request and returns its response (the bridge sends nothing else unasked).
    pub(crate) async fn ask(&mut self, line: &str) -> Value {
        self.send(line).await;
        let text = tokio::time::timeout(Duration::from_secs(20), self.out.next_line())
            .await
            .expect("an answer within 20 s")
            .unwrap()
            .expect("the bridge closed its output");
        serde_json::from_str(&text).unwrap()
    }
}

pub(crate) fn call_line(id: u32, arguments: Value, extra: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"create_invoice","arguments":{arguments}{extra}}}}}"#
    )
}

/// The gateway's own errors come through unchanged; `params.idempotencyKey` survives the
/// bridge; a call the gateway would refuse as ambiguous JSON is refused, not altered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_errors_and_operation_keys_pass_through() {
    let (target, _dir, served) = setup("connect-pass", |t| t).await;
    let mut agent = Lines::start(&served.url, &[]).await;
    let first = agent
        .ask(&call_line(
            1,
            json!({"customer": "key-co", "amount": 100}),
            r#","idempotencyKey":"order-1""#,
        ))
        .await;
    let ex = &first["result"]["structuredContent"]["execution"];
    assert_eq!(ex["state"], "completed", "{first}");
    let original = ex["execution_id"].as_str().unwrap().to_string();
    // The same key with another amount: the gateway's conflict, as the gateway sent it.
    let conflict = agent
        .ask(&call_line(
            2,
            json!({"customer": "key-co", "amount": 999}),
            r#","idempotencyKey":"order-1""#,
        ))
        .await;
    assert_eq!(conflict["id"], 2);
    assert_eq!(conflict["error"]["code"], -32010, "{conflict}");
    assert_eq!(conflict["error"]["data"]["original_execution_id"], original);
    assert!(conflict["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&original));
    let dup = agent
        .ask(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_invoice","arguments":{"customer":"dup-co","amount":5,"amount":500}}}"#)
        .await;
    assert_eq!(dup["error"]["code"], -32602, "{dup}");
    assert!(dup["error"]["message"]
        .as_str()
        .unwrap()
        .contains("duplicate object key \"amount\""));
    let unknown = agent
        .ask(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"delete_everything","arguments":{}}}"#)
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown tool"));
    assert_eq!(target.state.count_for("key-co"), 1);
    assert_eq!(target.state.count_for("dup-co"), 0);
    assert_eq!(target.state.invoices()[0].amount, 100);
}

/// The gateway stays silent past the recovery time: the agent gets a plain (non-error) result
/// saying the outcome is not known and not to start it as a new action; the re-issues attached
/// to the one execution, so the target saw one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_in_time_is_reported_as_not_known_never_as_an_error() {
    let (target, _dir, served) = setup("connect-silent", |t| {
        t.replace("response_timeout = \"1s\"", "response_timeout = \"30s\"")
    })
    .await;
    target.state.set_mode(Mode::HangAfterCreate);
    let mut agent = Lines::start(
        &served.url,
        &["--attempt-timeout", "1s", "--recovery-time", "3s"],
    )
    .await;
    let started = Instant::now();
    let resp = agent
        .ask(&call_line(
            1,
            json!({"customer": "silent-co", "amount": 7}),
            "",
        ))
        .await;
    assert!(started.elapsed() < Duration::from_secs(8), "bounded");
    let result = &resp["result"];
    assert_eq!(result["isError"], false, "{resp}");
    assert_eq!(
        result["structuredContent"]["execution"]["state"], "unknown_to_bridge",
        "{resp}"
    );
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("outcome not known"), "{text}");
    assert!(text.contains("Do not start it as a new action"), "{text}");
    assert!(text.contains("repeat this identical call"), "{text}");
    assert!(
        result["structuredContent"]["bridge"]["attempts"]
            .as_u64()
            .unwrap()
            >= 2
    );
    assert_eq!(target.state.count_for("silent-co"), 1);
    assert_eq!(
        target
            .state
            .requests()
            .iter()
            .filter(|r| r.method == "POST")
            .count(),
        1,
        "re-issues attached to the execution in flight"
    );
}

/// The gateway is killed and restarted (same ledger, another port): the bridge's session is
/// gone (404), it gets a new one, and a repeated call is answered from the ledger's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_gets_a_new_session_and_the_same_record() {
    let (target, dir, served) = setup("connect-restart", |t| t).await;
    let proxy = proxy(addr_of(&served), 0, 0).await;
    let mut agent = Lines::start(&proxy.url, &["--attempt-timeout", "5s"]).await;
    let args = json!({"customer": "restart-co", "amount": 3});
    let first = agent.ask(&call_line(1, args.clone(), "")).await;
    let ex = &first["result"]["structuredContent"]["execution"];
    assert_eq!(ex["state"], "completed", "{first}");
    let original = ex["execution_id"].clone();

    served.kill9();
    let text = std::fs::read_to_string(dir.0.join("postern.toml")).unwrap();
    let restarted = Served::start(&dir.0, &text);
    proxy.set_upstream(addr_of(&restarted));

    let other = agent
        .ask(&call_line(
            2,
            json!({"customer": "after-co", "amount": 4}),
            "",
        ))
        .await;
    assert_eq!(
        other["result"]["structuredContent"]["execution"]["state"], "completed",
        "{other}"
    );
    let again = agent.ask(&call_line(3, args, "")).await;
    let ex = &again["result"]["structuredContent"]["execution"];
    assert_eq!(ex["execution_id"], original, "{again}");
    assert_eq!(ex["attempt"], "recovered", "{again}");
    assert_eq!(target.state.count_for("restart-co"), 1);
    assert_eq!(target.state.count_for("after-co"), 1);
}

/// The gateway is gone (connections refused) for the whole recovery time: nothing left the
/// bridge, and the agent is told so, as an error result it may safely act on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_gateway_is_reported_as_not_sent() {
    let (target, _dir, served) = setup("connect-gone", |t| t).await;
    let mut agent = Lines::start(&served.url, &["--recovery-time", "2s"]).await;
    served.kill9();
    let resp = agent
        .ask(&call_line(
            1,
            json!({"customer": "gone-co", "amount": 1}),
            "",
        ))
        .await;
    let result = &resp["result"];
    assert_eq!(result["isError"], true, "{resp}");
    assert_eq!(
        result["structuredContent"]["execution"]["state"], "not_sent",
        "{resp}"
    );
    assert!(result["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Nothing was sent"));
    assert!(target.state.requests().is_empty());
}

fn run_bridge(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_postern"));
    cmd.arg("connect").args(args).env_remove("POSTERN_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A missing token, a token on the command line, a bad URL, a wrong token: clear errors, exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_misplaced_tokens_and_bad_urls_are_refused_clearly() {
    let url = "http://127.0.0.1:9/mcp";
    let (code, err) = run_bridge(&[url], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("environment variable POSTERN_TOKEN is not set"),
        "{err}"
    );
    let (code, err) = run_bridge(&[url, "--token-env", "MY_GATEWAY_TOKEN"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("MY_GATEWAY_TOKEN is not set"), "{err}");
    let (code, err) = run_bridge(&[url, "--token", "secret-on-the-command-line"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("refusing a token on the command line"),
        "{err}"
    );
    assert!(!err.contains("secret-on-the-command-line"), "{err}");
    for (bad, says) in [
        ("not a url", "invalid URL"),
        ("ftp://127.0.0.1/mcp", "unsupported scheme"),
    ] {
        let (code, err) = run_bridge(&[bad], &[("POSTERN_TOKEN", BILLING_TOKEN)]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains(says), "{bad}: {err}");
    }
    // --ca-file is for https only, and must hold a certificate.
    let (code, err) = run_bridge(
        &[url, "--ca-file", "/dev/null"],
        &[("POSTERN_TOKEN", BILLING_TOKEN)],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--ca-file") && err.contains("use https://"),
        "{err}"
    );
    let (code, err) = run_bridge(
        &["https://127.0.0.1:9/mcp", "--ca-file", "/dev/null"],
        &[("POSTERN_TOKEN", BILLING_TOKEN)],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--ca-file /dev/null") && err.contains("no PEM certificate"),
        "{err}"
    );
    let (_target, _dir, served) = setup("connect-token", |t| t).await;
    let (code, err) = run_bridge(
        &[&served.url],
        &[("POSTERN_TOKEN", "not-the-right-token-0123456789")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("refused the token (HTTP 401)"), "{err}");
}

/// `postern connect https://` with `--ca-file`: the bridge verifies the gateway's certificate
/// against the CA and calls through it; without the CA (the webpki roots only) it refuses the
/// gateway's certificate and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_gateway_is_reached_with_its_ca_and_refused_without() {
    let gw = crate::tls_listener::tls_gateway("connect-https", |t| t).await;
    let ca = gw.ca_file.to_str().unwrap().to_string();
    let mut agent = Lines::start(&gw.served.url, &["--ca-file", &ca]).await;
    let answer = agent
        .ask(&call_line(
            1,
            json!({"customer": "tls-bridge", "amount": 3}),
            "",
        ))
        .await;
    let ex = &answer["result"]["structuredContent"]["execution"];
    assert_eq!(ex["state"], "completed", "{answer}");
    assert_eq!(gw.target.state.count_for("tls-bridge"), 1);
    let (code, err) = run_bridge(&[&gw.served.url], &[("POSTERN_TOKEN", BILLING_TOKEN)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("does not trust")
            && err.contains("UnknownIssuer")
            && err.contains("--ca-file"),
        "{err}"
    );
}

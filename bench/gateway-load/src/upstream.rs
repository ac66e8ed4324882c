//! `--upstream`: the same `tools/call` to one upstream MCP server (the demo upstream over
//! Streamable HTTP, one process for every route), sent directly, through Postern, and through
//! CTRLRun 0.12.2 (PyPI `ctrlrun[gateway]`, installed by `bench/upstream-setup.sh` into a
//! throwaway venv), at concurrency 1 and 32, in one run. Every call carries unique arguments,
//! so through Postern each is a new durable execution (two ledger commits) and through CTRLRun
//! a new effect (`effect: "invoice:{customer}"`, one reservation and receipt each).
//!
//!     bash bench/upstream-setup.sh && cargo build --release -p postern && \
//!     cargo run --release -p postern-gateway-load -- --upstream [--ctrlrun PATH] [--calls N1,N32]
//!
//! Defaults: 1000 calls at c=1, 4000 at c=32 (after 10 warm-up calls per worker).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{sse_message, Run, Served, TOKEN, WARMUP_PER_WORKER};

/// The demo upstream's one resource.
const PRICE_LIST_URI: &str = "demo://books/price-list";

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One MCP session (protocol 2025-06-18) over a keep-alive connection.
pub(crate) struct Session {
    http: reqwest::Client,
    url: String,
    session: String,
    next_id: u64,
}

impl Session {
    pub(crate) async fn open(url: &str) -> Session {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut s = Session {
            http,
            url: url.to_string(),
            session: String::new(),
            next_id: 0,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "postern-upstream-load", "version": "1.0"}}});
        let resp = s.post(&init).send().await.unwrap();
        assert!(
            resp.status().is_success(),
            "initialize at {url}: {}",
            resp.status()
        );
        s.session = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_string();
        resp.bytes().await.unwrap();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        s.post(&note).send().await.unwrap().bytes().await.unwrap();
        s
    }

    /// Ends the session (`DELETE`), so a later round's sessions are not over the per-actor cap.
    pub(crate) async fn close(&self) {
        let _ = self
            .http
            .delete(&self.url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("mcp-session-id", &self.session)
            .send()
            .await;
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(&self.url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if !self.session.is_empty() {
            req = req
                .header("mcp-session-id", &self.session)
                .header("mcp-protocol-version", "2025-06-18");
        }
        req
    }

    /// One request: a `tools/call` (see [`Session::call_tool`]) or a `resources/read`.
    pub(crate) async fn perform(&mut self, op: Op, through_postern: bool) {
        match op {
            Op::Call(tool, arguments) => self.call_tool(tool, arguments, through_postern).await,
            Op::Read(uri) => self.read_resource(uri).await,
        }
    }

    /// One `resources/read`; panics unless it answered with contents.
    async fn read_resource(&mut self, uri: &str) {
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "resources/read", "params": {"uri": uri}});
        let text = self.post(&body).send().await.unwrap().text().await.unwrap();
        let msg = sse_message(&text);
        assert!(msg["result"]["contents"].is_array(), "{text}");
    }

    /// One `tools/call`; panics unless it succeeded (through Postern: as a new completed
    /// execution).
    pub(crate) async fn call_tool(&mut self, name: &str, arguments: Value, through_postern: bool) {
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
        let text = self.post(&body).send().await.unwrap().text().await.unwrap();
        let msg = sse_message(&text);
        assert!(
            msg["result"]["isError"] != true && msg["result"].is_object(),
            "{text}"
        );
        if through_postern {
            let ex = &msg["result"]["structuredContent"]["execution"];
            assert!(
                ex["state"] == "completed" && ex["attempt"] == "new",
                "{text}"
            );
        }
    }
}

/// The head of a table of routes' figures (`unit`: what the rate counts).
pub(crate) fn print_header(unit: &str) {
    println!(
        "{:<8} {:>3} {:>9} {:>9} {:>10}",
        "route", "c", "p50 ms", "p99 ms", unit
    );
}

/// One route's figures at concurrency `c`.
pub(crate) fn print_row(route: &str, c: usize, r: &Run) {
    println!(
        "{route:<8} {c:>3} {:>9.2} {:>9.2} {:>10.0}",
        r.pct(0.5),
        r.pct(0.99),
        r.rate
    );
}

/// What one measured request is.
#[derive(Clone)]
pub(crate) enum Op {
    /// A `tools/call` of the tool with these arguments.
    Call(&'static str, Value),
    /// A `resources/read` of this URI (not an action: never recorded as an execution).
    Read(&'static str),
}

async fn measure(
    url: &str,
    concurrency: usize,
    calls: usize,
    tag: &str,
    postern: bool,
    work_ms: u64,
) -> Run {
    let call = move |n: &str| {
        let mut arguments = json!({"customer": n, "amount": 1});
        if work_ms > 0 {
            arguments["delay_ms"] = json!(work_ms);
        }
        Op::Call("create_invoice", arguments)
    };
    measure_calls(url, concurrency, calls, tag, postern, call).await
}

/// `concurrency` MCP sessions call until `calls` are made, each call `call(unique tag)`
/// (a tool and its arguments), after the warm-up calls; through Postern each must be a new
/// completed execution.
pub(crate) async fn measure_calls(
    url: &str,
    concurrency: usize,
    calls: usize,
    tag: &str,
    postern: bool,
    call: impl Fn(&str) -> Op + Copy + Send + 'static,
) -> Run {
    let mut clients = Vec::new();
    for w in 0..concurrency {
        let mut c = Session::open(url).await;
        for i in 0..WARMUP_PER_WORKER {
            c.perform(call(&format!("{tag}-w{w}-{i}")), postern).await;
        }
        clients.push(c);
    }
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            let (next, tag) = (next.clone(), tag.to_string());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        c.close().await;
                        return lat;
                    }
                    let op = call(&format!("{tag}-{i}"));
                    let t = Instant::now();
                    c.perform(op, postern).await;
                    lat.push(t.elapsed());
                }
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for w in workers {
        latencies.extend(w.await.unwrap());
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Run { latencies, rate }
}

fn wait_listening(addr: &str) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on {addr}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn run(
    rt: &tokio::runtime::Runtime,
    postern: &Path,
    ctrlrun: Option<PathBuf>,
    dir: &Path,
    calls: (usize, usize),
    work_ms: &[u64],
) {
    let ctrlrun = ctrlrun.unwrap_or_else(|| {
        let home = std::env::var("HOME").unwrap_or_default();
        PathBuf::from(home).join(".cache/postern-bench/ctrlrun-venv/bin/ctrlrun")
    });
    assert!(
        ctrlrun.exists(),
        "{} is missing: run bash bench/upstream-setup.sh (or give --ctrlrun PATH)",
        ctrlrun.display()
    );
    // The upstream: one process for every route, counting calls only (no journal file).
    let mut child = Command::new(postern)
        .args(["demo-upstream", "--http", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _upstream = Process(child);
    let upstream = line.trim().to_string();

    let config = format!(
        r#"
[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}

[[actor]]
name = "bench"
token = {{ file = "bench.token" }}

[upstream.books]
url = "{upstream}"

[[tool]]
name = "create_invoice"
class = "idempotent_write"
match_window = "10m"
mcp = {{ server = "books", tool = "create_invoice" }}
"#
    );
    let gw_dir = dir.join("postern");
    std::fs::create_dir_all(&gw_dir).unwrap();
    let served = Served::start_with(postern, &gw_dir, config, &[]);

    let cr_dir = dir.join("ctrlrun");
    std::fs::create_dir_all(&cr_dir).unwrap();
    std::fs::write(
        cr_dir.join("ctrlrun.yaml"),
        "schema: ctrlrun.policy/v2\nactions:\n  mcp.books.create_invoice:\n    effect: \"invoice:{customer}\"\n    decision: allow\n",
    )
    .unwrap();
    let cr_port = free_port();
    let cr_child = Command::new(&ctrlrun)
        .args([
            "gateway",
            "--upstream",
            &upstream,
            "--alias",
            "books",
            "--principal",
            "bench",
        ])
        .args(["--listen", &format!("127.0.0.1:{cr_port}")])
        .current_dir(&cr_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _ctrlrun = Process(cr_child);
    wait_listening(&format!("127.0.0.1:{cr_port}"));
    let ctrl_url = format!("http://127.0.0.1:{cr_port}/mcp");

    // Postern lists the upstream's tools once its link is up.
    std::thread::sleep(Duration::from_millis(500));
    let routes = [
        ("direct", upstream.as_str(), false),
        ("postern", served.url.as_str(), true),
        ("ctrlrun", ctrl_url.as_str(), false),
    ];
    println!("upstream MCP server (demo upstream, Streamable HTTP), one tools/call per request, MCP 2025-06-18 sessions");
    for &work in work_ms {
        compare(rt, &routes, calls, work);
    }
    compare_reads(rt, &routes[..2], calls);
}

/// A `resources/read` of the upstream's one resource, directly and passed through Postern.
fn compare_reads(
    rt: &tokio::runtime::Runtime,
    routes: &[(&str, &str, bool)],
    calls: (usize, usize),
) {
    println!();
    println!("resources/read of {PRICE_LIST_URI} (passed through: not an execution)");
    print_header("reads/s");
    let mut results = std::collections::HashMap::new();
    for (c, n) in [(1, calls.0), (32, calls.1)] {
        for &(route, url, _) in routes {
            let tag = format!("{route}-read-c{c}");
            let r = rt.block_on(measure_calls(url, c, n, &tag, false, |_| {
                Op::Read(PRICE_LIST_URI)
            }));
            print_row(route, c, &r);
            results.insert((route, c), r);
        }
    }
    println!(
        "c=1: a resources/read through Postern adds {:.2} ms to direct's p50 (goal <= 1 ms); c=32: Postern / direct reads/s = {:.2}",
        results[&("postern", 1)].pct(0.5) - results[&("direct", 1)].pct(0.5),
        results[&("postern", 32)].rate / results[&("direct", 32)].rate
    );
}

/// Every route at c=1 and c=32, the upstream working `work` ms on each call.
fn compare(
    rt: &tokio::runtime::Runtime,
    routes: &[(&str, &str, bool)],
    calls: (usize, usize),
    work: u64,
) {
    println!();
    println!("the upstream works {work} ms per call");
    print_header("calls/s");
    let mut results = std::collections::HashMap::new();
    for (c, n) in [(1, calls.0), (32, calls.1)] {
        for &(route, url, postern_route) in routes {
            let tag = format!("{route}-w{work}-c{c}");
            let r = rt.block_on(measure(url, c, n, &tag, postern_route, work));
            print_row(route, c, &r);
            results.insert((route, c), r);
        }
    }
    let p50 = |route, c| results[&(route, c)].pct(0.5);
    let rate = |route, c| results[&(route, c)].rate;
    println!(
        "c=1: Postern adds {:.2} ms to direct's p50 (goal <= 2 ms); Postern p50 / CTRLRun p50 = {:.2}",
        p50("postern", 1) - p50("direct", 1),
        p50("postern", 1) / p50("ctrlrun", 1)
    );
    println!(
        "c=32: Postern / direct calls/s = {:.2} (goal >= 0.8); Postern / CTRLRun calls/s = {:.2} (goal >= 5)",
        rate("postern", 32) / rate("direct", 32),
        rate("postern", 32) / rate("ctrlrun", 32)
    );
}

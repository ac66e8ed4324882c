//! The gateway benchmark: `tools/call` latency through a real `postern serve` process against
//! the same request sent directly to the target, and durable calls per second, beside the
//! ledger's two-commit floor measured on the same disk in the same run.
//!
//!     cargo build --release -p postern && cargo run --release -p postern-gateway-load -- \
//!         [--postern PATH] [--calls N|N1,N32] [--seconds S] [--keep DIR]
//!
//! Loopback only: the invoice API (`postern_gateway::demo_target`) runs in this process, the
//! gateway is a child process with a SQLite ledger in a temporary directory. Every call through
//! Postern carries unique arguments, so each is a new durable execution (accept + authorized +
//! dispatched in one commit, the POST to the API, completed in a second commit), never a match.
//! Direct calls are the same JSON POST with an `Idempotency-Key`, over a keep-alive connection.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postern_gateway::demo_target::InvoiceApi;
use serde_json::{json, Value};

const TOKEN: &str = "bench-token-0123456789abcdef0123";
/// Unrecorded calls each worker makes before the measured ones (connections, caches, pages).
const WARMUP_PER_WORKER: usize = 10;

/// The gateway configuration: one idempotent tool in front of the invoice API at `target`.
fn config(target: &str) -> String {
    format!(
        r#"
[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}
attach_wait = "10s"
max_body_bytes = 65536

[[actor]]
name = "bench"
token = {{ file = "bench.token" }}

[[tool]]
name = "create_invoice"
description = "Create an invoice"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], additionalProperties = false, properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "5s" }}
recovery = {{ status_query = {{ method = "GET", url = "{target}/invoices?idempotency_key={{execution_id}}" }} }}
"#
    )
}

/// A `postern serve` child process; killed when dropped.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    fn start(postern: &Path, dir: &Path, target: &str) -> Served {
        let files = [
            ("postern.toml", config(target)),
            (
                "fp.key",
                "7f3a1e0b6a2d4f5e7c9b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f".into(),
            ),
            (
                "signing.key",
                "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60".into(),
            ),
            ("bench.token", TOKEN.into()),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let config = dir.join("postern.toml");
        let mut child = Command::new(postern)
            .args(["serve", "-c", config.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e} (build it first: cargo build --release -p postern)",
                    postern.display()
                )
            });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let Some(url) = line.trim().strip_prefix("postern listening on ") else {
            let _ = child.kill();
            panic!("unexpected first line from postern serve: {line:?}");
        };
        let url = url.to_string();
        // Keep reading its stdout (until it exits) so a later line never meets a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Served { child, url }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raw fsync rate: 512 B appends, each followed by fdatasync (as the ledger benchmark).
fn fsync_rate(dir: &Path, seconds: f64) -> f64 {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = [7u8; 512];
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        f.write_all(&block).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(&path).unwrap();
    rate
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Direct,
    Postern,
}

/// One worker's client: its own keep-alive connection and, through Postern, its own MCP session.
struct Client {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    async fn connect(route: Route, url: &str) -> Client {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut c = Client {
            http,
            url: url.to_string(),
            session: None,
            next_id: 0,
        };
        if route == Route::Postern {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "postern-gateway-load", "version": "1.0"}}});
            let resp = c.mcp_post(&init).send().await.unwrap();
            assert!(resp.status().is_success(), "initialize: {}", resp.status());
            let session = resp.headers().get("mcp-session-id").unwrap().to_str();
            c.session = Some(session.unwrap().to_string());
            resp.bytes().await.unwrap();
            let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let resp = c.mcp_post(&note).send().await.unwrap();
            assert!(
                resp.status().as_u16() < 300,
                "initialized: {}",
                resp.status()
            );
            resp.bytes().await.unwrap();
        }
        c
    }

    fn mcp_post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(&self.url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-06-18");
        }
        req
    }

    /// One call that creates one invoice for `customer`; panics unless it did.
    async fn call(&mut self, customer: &str, amount: u64) {
        let arguments = json!({"customer": customer, "amount": amount});
        if self.session.is_none() {
            let resp = self
                .http
                .post(&self.url)
                .header("idempotency-key", customer)
                .header("content-type", "application/json")
                .body(arguments.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 201, "direct POST /invoices");
            resp.bytes().await.unwrap();
            return;
        }
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": {"name": "create_invoice", "arguments": arguments}});
        let resp = self.mcp_post(&body).send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        assert_eq!(status, 200, "tools/call: {text}");
        let msg = sse_message(&text);
        let execution = &msg["result"]["structuredContent"]["execution"];
        assert!(
            execution["state"] == "completed" && execution["attempt"] == "new",
            "not a new completed execution: {text}"
        );
    }
}

/// A JSON body, or the JSON-RPC response on an SSE stream's data lines.
fn sse_message(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return v;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC response in {body:?}"))
}

#[derive(Clone, Copy)]
enum Budget {
    Calls(usize),
    Seconds(f64),
}

struct Run {
    /// Latency of every measured call, sorted.
    latencies: Vec<Duration>,
    /// Measured calls per second of wall time.
    rate: f64,
    /// Calls made, warm-up included.
    total: usize,
}

impl Run {
    fn pct(&self, q: f64) -> f64 {
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i].as_secs_f64() * 1e3
    }
}

/// `concurrency` workers, each with its own client, call until the budget is spent.
async fn run(route: Route, url: &str, concurrency: usize, budget: Budget, tag: &str) -> Run {
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(tokio::sync::Barrier::new(concurrency + 1));
    let go = Arc::new(tokio::sync::Barrier::new(concurrency + 1));
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let (next, stop, ready, go) = (next.clone(), stop.clone(), ready.clone(), go.clone());
            let (url, tag) = (url.to_string(), tag.to_string());
            tokio::spawn(async move {
                let mut client = Client::connect(route, &url).await;
                for i in 0..WARMUP_PER_WORKER {
                    client.call(&format!("{tag}-w{w}-warm{i}"), i as u64).await;
                }
                ready.wait().await;
                go.wait().await;
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let more = match budget {
                        Budget::Calls(n) => i < n,
                        Budget::Seconds(_) => !stop.load(Ordering::Relaxed),
                    };
                    if !more {
                        return lat;
                    }
                    let started = Instant::now();
                    client.call(&format!("{tag}-{i}"), i as u64).await;
                    lat.push(started.elapsed());
                }
            })
        })
        .collect();
    ready.wait().await;
    let started = Instant::now();
    go.wait().await;
    if let Budget::Seconds(s) = budget {
        tokio::time::sleep(Duration::from_secs_f64(s)).await;
        stop.store(true, Ordering::Relaxed);
    }
    let mut latencies = Vec::new();
    for w in workers {
        latencies.extend(w.await.unwrap());
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let total = latencies.len() + concurrency * WARMUP_PER_WORKER;
    Run {
        latencies,
        rate,
        total,
    }
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let postern =
        arg("--postern").map_or_else(|| workspace.join("target/release/postern"), PathBuf::from);
    let calls: Vec<usize> = arg("--calls").map_or(vec![2000, 8000], |s| {
        s.split(',').map(|c| c.parse().unwrap()).collect()
    });
    let (calls1, calls32) = (calls[0], *calls.get(1).unwrap_or(&calls[0]));
    let seconds: f64 = arg("--seconds").map_or(5.0, |s| s.parse().unwrap());
    let keep = arg("--keep").map(PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("postern-gateway-load-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let api = rt.block_on(InvoiceApi::start()).unwrap();
    let served = Served::start(&postern, &dir, &api.url(""));
    let direct = api.url("/invoices");
    println!(
        "postern gateway benchmark — {} serve → invoice API at {} (loopback); SQLite ledger in {}",
        postern.display(),
        api.addr,
        dir.display()
    );
    let fsync = fsync_rate(&dir, 2.0);
    let floor_ms = 2.0 / fsync * 1e3;
    println!("raw fsync rate (512 B append + fdatasync):      {fsync:>8.0} /s");
    println!("two-commit floor latency (2 ÷ fsync rate):      {floor_ms:>8.3} ms");
    println!(
        "latency per call (ms), {WARMUP_PER_WORKER} unrecorded warm-up calls per worker first:"
    );
    println!("              calls │   direct p50    p99 │  postern p50    p99 │ added p50 │ postern calls/s");
    let mut added_c1 = 0.0;
    for (c, n) in [(1, calls1), (32, calls32)] {
        let mut runs = Vec::new();
        for (route, url) in [(Route::Direct, &direct), (Route::Postern, &served.url)] {
            api.state.reset();
            let tag = format!("{}-c{c}", if route == Route::Direct { "d" } else { "p" });
            let r = rt.block_on(run(route, url, c, Budget::Calls(n), &tag));
            assert_eq!(api.state.invoices().len(), r.total, "one invoice per call");
            runs.push(r);
        }
        let (d, p) = (&runs[0], &runs[1]);
        let added = p.pct(0.5) - d.pct(0.5);
        if c == 1 {
            added_c1 = added;
        }
        println!(
            "concurrency {c:>2} {n:>6} │ {:>12.3} {:>6.3} │ {:>12.3} {:>6.3} │ {added:>+9.3} │ {:>8.0}",
            d.pct(0.5),
            d.pct(0.99),
            p.pct(0.5),
            p.pct(0.99),
            p.rate
        );
    }
    let mut rates = Vec::new();
    for (route, url) in [(Route::Direct, &direct), (Route::Postern, &served.url)] {
        api.state.reset();
        let tag = format!("{}-c64", if route == Route::Direct { "d" } else { "p" });
        let r = rt.block_on(run(route, url, 64, Budget::Seconds(seconds), &tag));
        assert_eq!(api.state.invoices().len(), r.total, "one invoice per call");
        rates.push(r);
    }
    let (d, p) = (&rates[0], &rates[1]);
    println!(
        "concurrency 64, {seconds} s: {:.0} durable calls/s through postern (p50 {:.3} ms, p99 {:.3} ms) = {:.2}× the raw fsync rate; direct {:.0} calls/s",
        p.rate,
        p.pct(0.5),
        p.pct(0.99),
        p.rate / fsync,
        d.rate
    );
    let over = added_c1 - floor_ms;
    println!(
        "added p50 at c=1 vs the two-commit floor latency: {over:+.3} ms (goal: within 1 ms) — {}",
        met(over <= 1.0)
    );
    println!(
        "durable calls/s at c=64: {:.0} (goal: at least 1,500) — {}",
        p.rate,
        met(p.rate >= 1500.0)
    );
    drop(served);
    if keep.is_some() {
        println!("kept: {} (ledger.db, postern.toml)", dir.display());
    } else {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

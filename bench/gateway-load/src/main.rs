//! The gateway benchmark: `tools/call` latency through a real `postern serve` process against
//! the same request sent directly to the target, and durable calls per second, beside the
//! ledger's two-commit floor measured on the same disk in the same run.
//!
//!     cargo build --release -p postern && cargo run --release -p postern-gateway-load -- \
//!         [--postern PATH] [--calls N|N1,N32] [--seconds S] [--keep DIR] [--protocol VERSION] \
//!         [--https]
//!
//! `--https` adds the target-transport comparison (`tls.rs`): plain http and https to the same
//! API, with and without connection reuse, at concurrency 1 and 64.
//!
//! `--soak MINUTES [--concurrency C] [--rate R]` runs the retention soak instead (see `soak.rs`).
//!
//! `--sessions N [--concurrency C]` measures the session cap under careless agents: an `initialize` at the cap
//! against one below it, and RSS after N abandoned sessions (see `sessions.rs`).
//!
//! `--ssh` compares a trivial remote command through Postern with a bare russh exec on a
//! loopback sshd (see `ssh.rs`).
//! `--upstream [--ctrlrun PATH] [--upstream-work-ms W,…]` compares, on one upstream MCP server, calls made directly,
//! through Postern and through CTRLRun (see `upstream.rs`).
//!
//! `--instructions [--baseline-postern PATH] [--calls N] [--check FILE]` counts the
//! instructions one durable call costs the gateway process under callgrind (`instructions.rs`).
//!
//! `--telemetry [--rounds N]` measures what metrics, logs and spans cost (see `telemetry.rs`).
//!
//! `--identity [--rounds N]` measures what an `[[issuer]]`'s JWT costs beside a static token
//! (see `identity.rs`); `--budget [--rounds N]` what checking a `[[budget]]` costs (`budgets.rs`).
//!
//! `--goals [--baseline-postern PATH] [--rounds N]` measures issue 37's two goals (c=1 over the
//! two-commit floor, c=64 against the raw fsync rate) for both protocol eras, alternating the
//! build under test with a baseline build in one run (see `goals.rs`).
//!
//! `--replicas [--pg URL] [--rounds N]` compares one replica on SQLite, one on PostgreSQL and
//! two on PostgreSQL behind HAProxy (see `replicas.rs`).
//!
//! `--approvals [--baseline-postern PATH] [--rounds N]` measures the human side instead (see `approvals.rs`):
//! calls without approval against a baseline build, and the time from an approval to the
//! target.
//!
//! MCP is spoken at protocol 2025-06-18 (a session per worker) unless `--protocol 2026-07-28`
//! asks for the sessionless protocol.
//!
//! Loopback only: the invoice API (`postern_demo::target`) runs in this process, the
//! gateway is a child process with a SQLite ledger in a temporary directory. Every call through
//! Postern carries unique arguments, so each is a new durable execution (accept + authorized +
//! dispatched in one commit, the POST to the API, completed in a second commit), never a match.
//! Direct calls are the same JSON POST with an `Idempotency-Key`, over a keep-alive connection.

// A measuring tool, not library code: its scenario functions may run long.
#![allow(clippy::too_many_lines)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postern_demo::target::InvoiceApi;
use serde_json::{json, Value};

mod ab;
mod approvals;
mod budgets;
mod goals;
mod identity;
mod instructions;
mod replicas;
mod sessions;
mod soak;
mod ssh;
mod telemetry;
mod tls;
mod upstream;

const TOKEN: &str = "bench-token-0123456789abcdef0123";
/// Unrecorded calls each worker makes before the measured ones (connections, caches, pages).
const WARMUP_PER_WORKER: usize = 10;

/// The gateway configuration: one idempotent tool in front of the invoice API at `target`,
/// records kept for `retention` (also the tool's match window); `https://` targets trust the
/// CA in `ca_file`.
fn config(target: &str, retention: &str, ca_file: Option<&str>) -> String {
    let ca = ca_file.map_or(String::new(), |f| format!(", ca_file = \"{f}\""));
    format!(
        r#"
[gateway]
retention = "{retention}"
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
match_window = "{retention}"
input_schema = {{ type = "object", required = ["customer", "amount"], additionalProperties = false, properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "5s"{ca} }}
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
        Served::start_with(postern, dir, config(target, "10m", None), &[])
    }

    /// A gateway with this configuration (its files in `dir`), with extra environment.
    fn start_with(postern: &Path, dir: &Path, config_text: String, env: &[(&str, &str)]) -> Served {
        Served::start_under(&[], postern, dir, config_text, env)
    }

    /// As [`Served::start_with`], the gateway run by `wrapper` (e.g. valgrind) when not empty.
    fn start_under(
        wrapper: &[String],
        postern: &Path,
        dir: &Path,
        config_text: String,
        env: &[(&str, &str)],
    ) -> Served {
        let files = [
            ("postern.toml", config_text),
            ("fp.key", "42".repeat(32)),
            ("signing.key", "09".repeat(32)),
            ("bench.token", TOKEN.to_string()),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
            // Secret files must be the owner's alone (the gateway refuses others).
            use std::os::unix::fs::PermissionsExt;
            let private = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(dir.join(name), private).unwrap();
        }
        let config = dir.join("postern.toml");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(postern);
                c
            }
            None => Command::new(postern),
        };
        let mut child = command
            .args(["serve", "-c", config.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .envs(env.iter().copied())
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

impl Served {
    /// The gateway's process id (valgrind's, when run under it: the tool runs in that process).
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the gateway as an operator would (SIGTERM), and waits until it has exited.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raw fsync rate: the ledger's own baseline probe (512 B appends, each `fdatasync`ed).
fn fsync_rate(dir: &Path, seconds: f64) -> f64 {
    postern_ledger::disk::fsync_rate(dir, std::time::Duration::from_secs_f64(seconds))
        .expect("the fsync probe could not write in the benchmark directory")
}

/// The MCP protocol versions the benchmark can speak: with a session (the `initialize`
/// handshake), or without one (each request carries its version in `_meta`).
const WITH_SESSION: &str = "2025-06-18";
const SESSIONLESS: &str = "2026-07-28";

/// One worker's client: its own keep-alive connection and, through Postern, MCP at `protocol`
/// (`None`: the plain JSON POST straight to the target).
struct Client {
    http: reqwest::Client,
    url: String,
    /// The bearer token every request carries.
    bearer: String,
    protocol: Option<&'static str>,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    async fn connect(protocol: Option<&'static str>, url: &str) -> Client {
        Client::connect_as(protocol, url, TOKEN).await
    }

    /// As [`Client::connect`], with `bearer` as the token.
    async fn connect_as(protocol: Option<&'static str>, url: &str, bearer: &str) -> Client {
        let timeout = Duration::from_secs(30);
        let mut c = Client {
            http: reqwest::Client::builder().timeout(timeout).build().unwrap(),
            url: url.to_string(),
            bearer: bearer.to_string(),
            protocol,
            session: None,
            next_id: 0,
        };
        if protocol == Some(WITH_SESSION) {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "postern-gateway-load", "version": "1.0"}}});
            let resp = c.mcp_post(&init).send().await.unwrap();
            assert!(resp.status().is_success(), "initialize: {}", resp.status());
            let session = resp.headers().get("mcp-session-id").unwrap().to_str();
            c.session = Some(session.unwrap().to_string());
            resp.bytes().await.unwrap();
            let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let resp = c.mcp_post(&note).send().await.unwrap();
            assert!(resp.status().is_success(), "initialized: {}", resp.status());
            resp.bytes().await.unwrap();
        }
        c
    }

    fn mcp_post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(&self.url)
            .header("authorization", format!("Bearer {}", self.bearer))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", WITH_SESSION);
        } else if self.protocol == Some(SESSIONLESS) {
            req = req
                .header("mcp-protocol-version", SESSIONLESS)
                .header("mcp-method", "tools/call")
                .header("mcp-name", "create_invoice");
        }
        req
    }

    /// One call that creates one invoice for `customer`; panics unless it did.
    async fn call(&mut self, customer: &str, amount: u64) {
        let arguments = json!({"customer": customer, "amount": amount});
        let Some(protocol) = self.protocol else {
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
        };
        self.next_id += 1;
        let mut body = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": {"name": "create_invoice", "arguments": arguments}});
        if protocol == SESSIONLESS {
            body["params"]["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": SESSIONLESS,
                "io.modelcontextprotocol/clientCapabilities": {}
            });
        }
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

/// The mean of `field` over the rows of `who` (a round's name, c=1 p50, c=64 calls/s).
fn mean_of(rows: &[(&str, f64, f64)], who: &str, field: fn(&(&str, f64, f64)) -> f64) -> f64 {
    let v: Vec<f64> = rows.iter().filter(|r| r.0 == who).map(field).collect();
    v.iter().sum::<f64>() / v.len() as f64
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
}

impl Run {
    /// The `q` quantile in milliseconds (NaN when nothing was measured).
    fn pct(&self, q: f64) -> f64 {
        let i = (self.latencies.len().saturating_sub(1) as f64 * q).round() as usize;
        self.latencies
            .get(i)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    }
}

/// `concurrency` workers, each with its own client, call until the budget is spent. Clients
/// connect and warm up first; the clock starts when every one of them is ready. The API starts
/// empty and must end with exactly one invoice per call.
async fn run(
    api: &InvoiceApi,
    protocol: Option<&'static str>,
    url: &str,
    concurrency: usize,
    budget: Budget,
    route: &str,
) -> Run {
    run_as(api, protocol, url, concurrency, budget, route, TOKEN).await
}

/// As [`run`], every worker carrying `bearer`.
async fn run_as(
    api: &InvoiceApi,
    protocol: Option<&'static str>,
    url: &str,
    concurrency: usize,
    budget: Budget,
    route: &str,
    bearer: &str,
) -> Run {
    api.reset();
    let tag = format!("{route}-c{concurrency}");
    let warmups: Vec<_> = (0..concurrency)
        .map(|w| {
            let (url, tag, bearer) = (url.to_string(), tag.to_string(), bearer.to_string());
            tokio::spawn(async move {
                let mut client = Client::connect_as(protocol, &url, &bearer).await;
                for i in 0..WARMUP_PER_WORKER {
                    client.call(&format!("{tag}-w{w}-warm{i}"), i as u64).await;
                }
                client
            })
        })
        .collect();
    let mut clients = Vec::new();
    for w in warmups {
        clients.push(w.await.unwrap());
    }
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let (next, stop, tag) = (next.clone(), stop.clone(), tag.to_string());
            tokio::spawn(async move {
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
                    let t = Instant::now();
                    client.call(&format!("{tag}-{i}"), i as u64).await;
                    lat.push(t.elapsed());
                }
            })
        })
        .collect();
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
    assert_eq!(api.invoices().len(), total, "one invoice per call");
    Run { latencies, rate }
}

fn main() {
    postern_channels::http::install_default_provider();
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    let postern =
        arg("--postern").map_or_else(|| workspace.join("target/release/postern"), PathBuf::from);
    let calls: Vec<usize> = arg("--calls").map_or(vec![2000, 8000], |s| {
        s.split(',').map(|c| c.parse().unwrap()).collect()
    });
    let (calls1, calls32) = (calls[0], *calls.get(1).unwrap_or(&calls[0]));
    let seconds: f64 = arg("--seconds").map_or(5.0, |s| s.parse().unwrap());
    let keep = arg("--keep").map(PathBuf::from);
    let protocol = match arg("--protocol").as_deref() {
        None | Some(WITH_SESSION) => WITH_SESSION,
        Some(SESSIONLESS) => SESSIONLESS,
        Some(other) => {
            panic!("--protocol {other}: expected {WITH_SESSION} (with a session) or {SESSIONLESS} (sessionless)")
        }
    };
    let dir = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("postern-gateway-load-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if args.iter().any(|a| a == "--upstream") {
        let ctrlrun = arg("--ctrlrun").map(PathBuf::from);
        let calls = (
            arg("--calls").map_or(1000, |_| calls1),
            arg("--calls").map_or(4000, |_| calls32),
        );
        let work: Vec<u64> = arg("--upstream-work-ms").map_or(vec![0, 10], |s| {
            s.split(',').map(|w| w.parse().unwrap()).collect()
        });
        upstream::run(&rt, &postern, ctrlrun, &dir, calls, &work);
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return;
    }
    if args.iter().any(|a| a == "--ssh") {
        let calls = (
            arg("--calls").map_or(300, |_| calls1),
            arg("--calls").map_or(1200, |_| calls32),
        );
        ssh::run(&rt, &postern, &dir, calls);
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return;
    }
    if args.iter().any(|a| a == "--instructions") {
        let baseline = arg("--baseline-postern").map(PathBuf::from);
        let mut builds = vec![("candidate", postern.as_path())];
        if let Some(b) = &baseline {
            builds.insert(0, ("baseline", b.as_path()));
        }
        let plan = instructions::Plan {
            builds,
            calls: arg("--calls").map_or(250, |c| c.parse().unwrap()),
            eras: instructions::eras(arg("--eras")),
            concurrency: arg("--concurrency").map_or(vec![1, 16], |s| {
                s.split(',').map(|c| c.parse().unwrap()).collect()
            }),
            check: arg("--check").map(PathBuf::from),
            write: arg("--write").map(PathBuf::from),
            extra_config: match args.iter().any(|a| a == "--budget") {
                true => budgets::BUDGETS,
                false => "",
            },
            keep: keep.is_some(),
        };
        let ok = rt.block_on(instructions::compare(&plan, &dir));
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::process::exit(i32::from(!ok));
    }
    if let Some(which) = ["--identity", "--budget"]
        .into_iter()
        .find(|w| args.iter().any(|a| a == w))
    {
        let measure = ab::Measure {
            postern: &postern,
            dir: &dir,
            seconds,
            calls: calls1,
            rounds: arg("--rounds").map_or(3, |r| r.parse().unwrap()),
        };
        match which {
            "--identity" => rt.block_on(identity::compare(&measure)),
            _ => rt.block_on(budgets::compare(&measure)),
        }
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return;
    }
    if args.iter().any(|a| a == "--telemetry") {
        let rounds = arg("--rounds").map_or(3, |r| r.parse().unwrap());
        rt.block_on(telemetry::compare(&postern, &dir, seconds, calls1, rounds));
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return;
    }
    if args.iter().any(|a| a == "--replicas") {
        let pg = arg("--pg").unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432".into());
        let rounds = arg("--rounds").map_or(2, |r| r.parse().unwrap());
        rt.block_on(replicas::compare(&postern, &dir, seconds, &pg, rounds));
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return;
    }
    if args.iter().any(|a| a == "--approvals") {
        let baseline = arg("--baseline-postern").map(PathBuf::from);
        let rounds = arg("--rounds").map_or(2, |r| r.parse().unwrap());
        rt.block_on(approvals::compare(
            &postern,
            baseline.as_deref(),
            &dir,
            seconds,
            calls1,
            rounds,
        ));
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return;
    }
    let api = rt.block_on(InvoiceApi::start()).unwrap();
    if let Some(n) = arg("--sessions") {
        let agents = arg("--concurrency").map_or(sessions::AGENTS, |c| c.parse().unwrap());
        sessions::run(
            &rt,
            &postern,
            &dir,
            &api.url(""),
            n.parse().unwrap(),
            agents,
        );
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return;
    }
    if args.iter().any(|a| a == "--goals") {
        let baseline = arg("--baseline-postern").map(PathBuf::from);
        let mut builds = vec![("candidate", postern.as_path())];
        if let Some(b) = &baseline {
            builds.insert(0, ("baseline", b.as_path()));
        }
        let plan = goals::Plan {
            builds,
            rounds: arg("--rounds").map_or(3, |r| r.parse().unwrap()),
            calls1,
            seconds,
        };
        rt.block_on(goals::compare(&plan, &api, &dir));
        if keep.is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return;
    }
    if let Some(minutes) = arg("--soak") {
        let served = Served::start_with(&postern, &dir, config(&api.url(""), "1m", None), &[]);
        let concurrency = arg("--concurrency").map_or(8, |c| c.parse().unwrap());
        let rate = arg("--rate").map(|r| r.parse().unwrap());
        soak::run(
            &rt,
            &served,
            &dir,
            minutes.parse().unwrap(),
            concurrency,
            rate,
        );
        return;
    }
    let served = Served::start(&postern, &dir, &api.url(""));
    let direct = api.url("/invoices");
    println!(
        "postern gateway benchmark — {} serve → invoice API at {} (loopback); SQLite ledger in {}",
        postern.display(),
        api.addr,
        dir.display()
    );
    // The disk's speed drifts: the baseline is probed right before the concurrency-1 runs and
    // right after them, and the floor uses the mean of the two.
    let fsync_before = fsync_rate(&dir, 1.5);
    println!(
        "raw fsync rate before the c=1 runs (512 B append + fdatasync): {fsync_before:>7.0} /s"
    );
    println!("MCP protocol {protocol}; latency in ms; each worker first makes {WARMUP_PER_WORKER} unrecorded warm-up calls");
    println!("                  │ direct          │ through postern │  added  │ calls/s");
    println!("concurrency  load │     p50     p99 │     p50     p99 │   p50   │  direct postern");
    let mut added_c1 = f64::NAN;
    let mut fsync_after = f64::NAN;
    let mut rate_c64 = f64::NAN;
    let levels = [
        (1, Budget::Calls(calls1)),
        (32, Budget::Calls(calls32)),
        (64, Budget::Seconds(seconds)),
    ];
    for (c, budget) in levels {
        let d = rt.block_on(run(&api.state, None, &direct, c, budget, "d"));
        let p = rt.block_on(run(&api.state, Some(protocol), &served.url, c, budget, "p"));
        let added = p.pct(0.5) - d.pct(0.5);
        let label = match budget {
            Budget::Calls(n) => n.to_string(),
            Budget::Seconds(s) => format!("{s}s"),
        };
        println!(
            "{c:>11} {label:>5} │ {:>7.3} {:>7.3} │ {:>7.3} {:>7.3} │ {added:>+7.3} │ {:>7.0} {:>7.0}",
            d.pct(0.5),
            d.pct(0.99),
            p.pct(0.5),
            p.pct(0.99),
            d.rate,
            p.rate
        );
        match c {
            1 => added_c1 = added,
            64 => rate_c64 = p.rate,
            _ => {}
        }
        if c == 1 {
            fsync_after = fsync_rate(&dir, 1.5);
        }
    }
    let fsync = (fsync_before + fsync_after) / 2.0;
    let floor_ms = 2.0 / fsync * 1e3;
    println!(
        "raw fsync rate after the c=1 runs:                             {fsync_after:>7.0} /s"
    );
    println!("two-commit floor latency (2 ÷ their mean):                     {floor_ms:>7.3} ms");
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let over = added_c1 - floor_ms;
    println!(
        "added p50 at c=1 vs the two-commit floor latency: {over:+.3} ms (goal: within 0.5 ms) — {}",
        verdict(over <= 0.5)
    );
    println!(
        "durable calls/s through postern at c=64: {rate_c64:.0} = {:.2}× the raw fsync rate (goal: at least 0.9×) — {}",
        rate_c64 / fsync,
        verdict(rate_c64 >= 0.9 * fsync)
    );
    if args.iter().any(|a| a == "--https") {
        tls::compare(&rt, &postern, &dir, protocol, &api, calls1, seconds);
    }
    drop(served);
    if keep.is_some() {
        println!("kept: {} (ledger.db, postern.toml)", dir.display());
    } else {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Investigation at scale (issue 17): a store with a million executions must still answer an
//! on-call engineer at once.
//!
//!     cargo build --release -p postern -p postern-store-scale
//!     target/release/postern-store-scale [--executions 1000000] [--store sqlite|postgres|both]
//!         [--postern target/release/postern] [--pg postgres://postgres@127.0.0.1:5432]
//!         [--keep DIR]
//!     target/release/postern-store-scale --measure STORE_URL --execution EXE   (a store filled before)
//!
//! Fills a store through the ledger API (accept-with-events, the same commit path the gateway
//! uses; plus a run per hundred executions and a calls-log row per execution): 20 actors, 10
//! tools, almost all delivered, a few unknown, under review or awaiting approval. Then, with the
//! release `postern` binary, each the median of several runs: `activity list` (first page,
//! filtered by actor, then by tool), `activity trace` of one execution, `postern serve`'s
//! start-up (spawn to "listening", including the recovery scan), a `/metrics` scrape, and the
//! gateway's RSS at idle. The same measurements on a 1,000-execution store filled the same way
//! in the same run are the baseline; figures are printed beside it with their ratio.

// A measuring tool, not library code: its scenario functions may run long.
#![allow(clippy::too_many_lines)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postern_core::config::Config;
use postern_core::lifecycle::Verdict;
use postern_core::record::{ActionRecord, Arguments};
use postern_core::{EventKind, FingerprintKey, Timestamp};
use postern_ledger::{AcceptRequest, CallRecord, Ledger, LedgerOptions, NewEvent, ResultBody, Run};
use postern_testkit::postgres::FreshDatabase;

const FP_KEY: &str = "4242424242424242424242424242424242424242424242424242424242424242";
const OPERATOR_TOKEN: &str = "scale-operator-token-0123456789abcdef";
const ACTORS: usize = 20;
const TOOLS: usize = 10;
const CONCURRENCY: usize = 128;

fn tools_config() -> String {
    let mut text = "[gateway]\nstore = \"sqlite://unused.db\"\nfingerprint_key = { file = \"fp.key\" }\n\n[[operator]]\nname = \"oncall\"\ntoken = { file = \"op.token\" }\n".to_string();
    for a in 0..ACTORS {
        text.push_str(&format!(
            "\n[[actor]]\nname = \"agent-{a}\"\ntoken = {{ file = \"actor-{a}.token\" }}\n"
        ));
    }
    for t in 0..TOOLS {
        text.push_str(&format!(
            r#"
[[tool]]
name = "tool_{t}"
class = "idempotent_write"
match_window = "10m"
http = {{ method = "POST", url = "http://127.0.0.1:9/invoices" }}
"#
        ));
    }
    text
}

fn now() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    )
}

/// The events after `accepted` for execution `i`: most delivered; every 997th unknown, every
/// 1999th under review, every 1000th awaiting approval (1,000 pending in a million: the
/// console's Approvals page is measured with them).
fn fate(i: usize) -> Vec<NewEvent> {
    let sent = [
        NewEvent::new(EventKind::Authorized),
        NewEvent::new(EventKind::Dispatched),
    ];
    if i.is_multiple_of(1000) {
        return vec![NewEvent::new(EventKind::ApprovalRequested)];
    }
    if i.is_multiple_of(1999) {
        return [
            sent[0].clone(),
            sent[1].clone(),
            NewEvent::new(EventKind::OutcomeUnknown),
            NewEvent::new(EventKind::ReviewRequired),
        ]
        .to_vec();
    }
    if i.is_multiple_of(997) {
        return [
            sent[0].clone(),
            sent[1].clone(),
            NewEvent::new(EventKind::OutcomeUnknown),
        ]
        .to_vec();
    }
    let body = format!("{{\"id\":\"inv_{i}\",\"status\":\"created\"}}").into_bytes();
    let mut completed = NewEvent::new(EventKind::Completed(Verdict::Applied))
        .with_detail(serde_json::json!({"target_status": 201}));
    completed.result = Some(ResultBody {
        size: body.len() as u64,
        body,
        truncated: false,
    });
    [
        sent[0].clone(),
        sent[1].clone(),
        completed,
        NewEvent::new(EventKind::Delivered),
    ]
    .to_vec()
}

/// Fills `url` with `n` executions; returns one from the middle (for `trace`).
async fn fill(url: &str, n: usize) -> String {
    let config = Config::parse(&tools_config(), "scale.toml").unwrap();
    let contracts: Vec<Arc<_>> = config.tools.iter().cloned().map(Arc::new).collect();
    let key = FingerprintKey::from_hex(FP_KEY).unwrap();
    let (ledger, _) = Ledger::open(url, LedgerOptions::default()).await.unwrap();
    let ledger = Arc::new(ledger);
    let next = Arc::new(AtomicUsize::new(0));
    let middle = Arc::new(std::sync::Mutex::new(String::new()));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (ledger, next, contracts, key, middle) = (
            ledger.clone(),
            next.clone(),
            contracts.clone(),
            key.clone(),
            middle.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let actor = format!("agent-{}", i % ACTORS);
                let contract = contracts[i % TOOLS].clone();
                let run = format!("run-{}-{}", i % ACTORS, i / (ACTORS * 100));
                if i % (ACTORS * 100) < ACTORS {
                    let mut r =
                        Run::new(run.clone(), actor.clone(), "streamable-http".into(), now());
                    r.client_name = Some("scale-agent".into());
                    let _ = ledger.start_run(r).await;
                }
                let arguments = Arguments::from_value(
                    serde_json::json!({"customer": format!("customer-{i}"), "amount": i}),
                )
                .unwrap();
                let record =
                    ActionRecord::build(&contract, &actor, None, &arguments, &key).unwrap();
                let mut req = AcceptRequest::new(record, &key, contract.clone(), now())
                    .unwrap()
                    .then(fate(i));
                req.run_id = Some(run.clone());
                let accepted = ledger.accept(req).await.unwrap();
                let s = match accepted {
                    postern_ledger::AcceptOutcome::Created { execution: s, .. } => s,
                    other => panic!("execution {i} matched another: {other:?}"),
                };
                if i == n / 2 {
                    *middle.lock().unwrap() = s.id.to_string();
                }
                ledger.record_call(CallRecord {
                    at: now(),
                    actor,
                    tool: s.tool.clone(),
                    run_id: Some(run),
                    request_id: Some(i.to_string()),
                    execution_id: Some(s.id),
                    attempt: "new".into(),
                    operation_key: None,
                    outcome: s.lifecycle.state.display_name().into(),
                    instance: ledger.instance().to_string(),
                });
                if i > 0 && i % 100_000 == 0 {
                    eprintln!(
                        "  {i} executions in {:.0} s",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    ledger.flush().await.unwrap();
    let rate = n as f64 / started.elapsed().as_secs_f64();
    eprintln!("  filled {n} executions at {rate:.0}/s");
    let id = middle.lock().unwrap().clone();
    id
}

/// The median wall time of `runs` runs of `postern args…`.
fn median_of(runs: usize, mut once: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..runs).map(|_| once()).collect();
    times.sort();
    times[runs / 2]
}

fn cli(postern: &Path, args: &[&str]) -> Duration {
    let t = Instant::now();
    let out = Command::new(postern).args(args).output().unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "postern {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

struct Figures {
    list_actor: Duration,
    list_tool: Duration,
    trace: Duration,
    startup: Duration,
    scrape: Duration,
    rss_kib: u64,
    /// The console's server time (`Server-Timing`) for the Approvals page and Activity's
    /// first page.
    ui_approvals: Duration,
    ui_activity: Duration,
}

/// The console's server time of `path` (median of 21), logged in as the operator.
async fn console_time(url: &str, path: &str) -> Duration {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = http.get(format!("{url}/ui/login")).send().await.unwrap();
    let cookie = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix(&format!("{name}=")))
            .map(|v| v.split(';').next().unwrap_or("").to_string())
            .unwrap()
    };
    let nonce = cookie(&page, "postern_login");
    let login = http
        .post(format!("{url}/ui/login"))
        .header("cookie", format!("postern_login={nonce}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "token={OPERATOR_TOKEN}&login_nonce={nonce}&next=%2Fui%2Fapprovals"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 303, "the operator logs in");
    let session = format!("postern_session={}", cookie(&login, "postern_session"));
    let mut times = Vec::new();
    for _ in 0..21 {
        let r = http
            .get(format!("{url}{path}"))
            .header("cookie", &session)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let dur: f64 = r.headers()["server-timing"]
            .to_str()
            .unwrap()
            .trim_start_matches("app;dur=")
            .parse()
            .unwrap();
        r.text().await.unwrap();
        times.push(Duration::from_secs_f64(dur / 1000.0));
    }
    times.sort();
    times[times.len() / 2]
}

fn measure(postern: &Path, dir: &Path, store: &str, execution: &str) -> Figures {
    if let Some(file) = store.strip_prefix("sqlite://") {
        // The gateway refuses a store others can read.
        use std::os::unix::fs::PermissionsExt;
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::set_permissions(
                format!("{file}{suffix}"),
                std::fs::Permissions::from_mode(0o600),
            );
        }
    }
    let list_actor = median_of(7, || {
        cli(
            postern,
            &[
                "activity", "list", "--store", store, "--actor", "agent-7", "--limit", "20",
            ],
        )
    });
    let list_tool = median_of(7, || {
        cli(
            postern,
            &[
                "activity", "list", "--store", store, "--tool", "tool_3", "--limit", "20",
            ],
        )
    });
    let trace = median_of(7, || {
        cli(postern, &["activity", "trace", execution, "--store", store])
    });
    // The gateway on this store: start-up, scrapes, idle RSS.
    let text = tools_config().replace("sqlite://unused.db", store);
    std::fs::write(dir.join("postern.toml"), text).unwrap();
    let mut files = vec![
        ("fp.key".to_string(), FP_KEY.to_string()),
        ("op.token".into(), OPERATOR_TOKEN.into()),
    ];
    for a in 0..ACTORS {
        files.push((
            format!("actor-{a}.token"),
            format!("scale-actor-token-{a}-0123456789abcdef"),
        ));
    }
    for (name, value) in &files {
        std::fs::write(dir.join(name), value).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut startups = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        if let Some(mut child) = last.take() {
            stop(&mut child);
        }
        let t = Instant::now();
        let mut child = Command::new(postern)
            .args([
                "serve",
                "-c",
                dir.join("postern.toml").to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        startups.push(t.elapsed());
        let url = line
            .trim()
            .strip_prefix("postern listening on ")
            .unwrap()
            .trim_end_matches("/mcp")
            .to_string();
        last = Some((child, url));
    }
    startups.sort();
    let (child, url) = last.unwrap();
    let mut child = (child, url.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    postern_channels::http::install_default_provider();
    let http = reqwest::Client::new();
    let scrape = rt.block_on(async {
        let mut times = Vec::new();
        for _ in 0..21 {
            let t = Instant::now();
            let resp = http
                .get(format!("{url}/metrics"))
                .bearer_auth(OPERATOR_TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            resp.text().await.unwrap();
            times.push(t.elapsed());
        }
        times.sort();
        times[times.len() / 2]
    });
    let ui_approvals = rt.block_on(console_time(&url, "/ui/approvals"));
    let ui_activity = rt.block_on(console_time(&url, "/ui/activity"));
    std::thread::sleep(Duration::from_secs(2));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.0.id())).unwrap();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    stop(&mut child);
    Figures {
        list_actor,
        list_tool,
        trace,
        startup: startups[startups.len() / 2],
        scrape,
        rss_kib,
        ui_approvals,
        ui_activity,
    }
}

fn stop(child: &mut (std::process::Child, String)) {
    let _ = Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status();
    let _ = child.0.wait();
}

/// The store for `tag`: a file in `dir`, or a database of its own on `pg`, dropped with the
/// guard once measured.
fn store_url(kind: &str, dir: &Path, pg: &str, tag: &str) -> (String, Option<FreshDatabase>) {
    match kind {
        "sqlite" => (
            format!("sqlite://{}", dir.join(format!("{tag}.db")).display()),
            None,
        ),
        _ => {
            let db = FreshDatabase::create(&format!("{pg}/postgres"), "postern_scale");
            (db.url(), Some(db))
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n: usize = arg("--executions").map_or(1_000_000, |v| v.parse().unwrap());
    let stores = match arg("--store").as_deref() {
        None | Some("both") => vec!["sqlite", "postgres"],
        Some(one) => vec![if one == "postgres" {
            "postgres"
        } else {
            "sqlite"
        }],
    };
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let postern =
        arg("--postern").map_or_else(|| workspace.join("target/release/postern"), PathBuf::from);
    let pg = arg("--pg").unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432".into());
    let dir = arg("--keep").map_or_else(
        || std::env::temp_dir().join(format!("postern-scale-{}", std::process::id())),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).unwrap();
    if let (Some(store), Some(execution)) = (arg("--measure"), arg("--execution")) {
        // A store filled earlier (e.g. by --keep): only the measurements.
        let sub = dir.join("measure");
        std::fs::create_dir_all(&sub).unwrap();
        let f = measure(&postern, &sub, &store, &execution);
        println!(
            "{store}: list --actor {:.1} ms, list --tool {:.1} ms, trace {:.1} ms, scrape {:.1} ms, console approvals {:.1} ms, console activity {:.1} ms, start-up {:.1} ms, RSS {:.1} MiB",
            ms(f.list_actor),
            ms(f.list_tool),
            ms(f.trace),
            ms(f.scrape),
            ms(f.ui_approvals),
            ms(f.ui_activity),
            ms(f.startup),
            f.rss_kib as f64 / 1024.0
        );
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!("postern store at scale — {} on this machine; medians; baseline: the same on a 1,000-execution store", postern.display());
    for kind in stores {
        let mut rows = Vec::new();
        for (tag, count) in [("base", 1000), ("large", n)] {
            eprintln!("{kind}: filling {count} executions");
            let (url, _database) = store_url(kind, &dir, &pg, tag);
            let execution = rt.block_on(fill(&url, count));
            let sub = dir.join(format!("{kind}-{tag}"));
            std::fs::create_dir_all(&sub).unwrap();
            rows.push(measure(&postern, &sub, &url, &execution));
        }
        let (b, l) = (&rows[0], &rows[1]);
        println!("\n{kind}, {n} executions (goal) │ 1,000 │ {n} │ ratio");
        for (what, goal, base, large) in [
            (
                "activity list --actor, first page",
                "≤ 50 ms",
                ms(b.list_actor),
                ms(l.list_actor),
            ),
            (
                "activity list --tool, first page",
                "≤ 50 ms",
                ms(b.list_tool),
                ms(l.list_tool),
            ),
            ("activity trace EXE", "≤ 50 ms", ms(b.trace), ms(l.trace)),
            ("/metrics scrape", "≤ 20 ms", ms(b.scrape), ms(l.scrape)),
            (
                "console Approvals page (server time)",
                "≤ 200 ms",
                ms(b.ui_approvals),
                ms(l.ui_approvals),
            ),
            (
                "console Activity page (server time)",
                "≤ 200 ms",
                ms(b.ui_activity),
                ms(l.ui_activity),
            ),
            (
                "serve start-up (with recovery scan)",
                "≤ 2000 ms",
                ms(b.startup),
                ms(l.startup),
            ),
        ] {
            println!(
                "  {what:<38} {goal:>10} │ {base:>7.1} ms │ {large:>7.1} ms │ {:.2}",
                large / base
            );
        }
        println!(
            "  {:<38} {:>10} │ {:>7.1} MiB │ {:>7.1} MiB │ {:.2}",
            "gateway RSS at idle",
            "≤ 64 MiB",
            b.rss_kib as f64 / 1024.0,
            l.rss_kib as f64 / 1024.0,
            l.rss_kib as f64 / b.rss_kib as f64
        );
    }
    if arg("--keep").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Issue 32, upstream faults: an HTTP upstream restarted under load. The gateway is not
//! restarted; calls keep working once the upstream is back (a request that finds the link's
//! session gone or the server unreachable was not taken: the link opens a new session and the
//! request is sent once on it, or fails with nothing sent when no link comes within the bound),
//! no more than one call waits its whole timeout, and nothing is applied twice
//! (the upstream's own journal). Two servers: Postern's demo upstream (rmcp: an unknown session
//! is HTTP 404, and it journals every applied call) and server-everything (the TypeScript SDK:
//! an unknown session is HTTP 400 with an error naming no request).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use postern_demo::upstream::Journal;
use serde_json::json;

use crate::foreign::NodeClients;
use crate::harness::{
    execution, operator, write_private, Dir, Mcp, Served, ALICE_TOKEN, BILLING_TOKEN,
};
use crate::upstream::{wait_available, wait_listed, HttpUpstream, GATEWAY, HEADER, TOOLS};

/// The upstream's answer timeout in these tests.
const TIMEOUT: Duration = Duration::from_secs(5);

fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

struct Seen {
    id: String,
    state: String,
    took: Duration,
    after_restart: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_restarted_under_load_keeps_serving_and_applies_nothing_twice() {
    let dir = Dir::new("up-restart");
    let journal = dir.0.join("journal.jsonl");
    let addr = free_addr();
    let mut upstream = HttpUpstream::start_on(&journal, &addr);
    let config = format!(
        "{HEADER}\n[upstream.books]\nurl = {:?}\ntimeout = \"5s\"\nstartup_timeout = \"5s\"\n\n{TOOLS}",
        upstream.url
    );
    let served = Served::start(&dir.0, &config);
    wait_listed(&served.url).await;
    let restarted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let url = served.url.clone();
        let restarted = restarted.clone();
        workers.push(tokio::spawn(async move {
            let mcp = Mcp::connect(&url, BILLING_TOKEN).await;
            let mut seen = Vec::new();
            for n in 0..30 {
                let started = Instant::now();
                let after_restart = restarted.load(std::sync::atomic::Ordering::SeqCst);
                let resp = mcp
                    .call(
                        "invoice",
                        json!({"customer": format!("w{w}-{n}"), "amount": n}),
                        json!({}),
                    )
                    .await;
                let e = execution(&resp);
                seen.push(Seen {
                    id: e["execution_id"].as_str().unwrap_or_default().to_string(),
                    state: e["state"].as_str().unwrap_or("(no execution)").to_string(),
                    took: started.elapsed(),
                    after_restart,
                });
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    // kill -9, and the same server again on the same address.
    upstream.child.kill().unwrap();
    upstream.child.wait().unwrap();
    let _again = HttpUpstream::start_on(&journal, &addr);
    tokio::time::sleep(Duration::from_millis(300)).await;
    restarted.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut seen = Vec::new();
    for w in workers {
        seen.extend(w.await.unwrap());
    }
    let count = |state: &str| seen.iter().filter(|s| s.state == state).count();
    let report = format!(
        "completed {}, failed {}, outcome_unknown {}, of {}",
        count("completed"),
        count("failed"),
        count("outcome_unknown"),
        seen.len()
    );
    // Every call is decided by the record: done, not sent, or unknown (in flight at the kill).
    for s in &seen {
        assert!(
            ["completed", "failed", "outcome_unknown"].contains(&s.state.as_str()),
            "{}: {} ({report})",
            s.id,
            s.state
        );
    }
    // Once the upstream is back, calls complete (the link opened a new session by itself).
    let late: Vec<&Seen> = seen.iter().filter(|s| s.after_restart).collect();
    let late_done = late.iter().filter(|s| s.state == "completed").count();
    assert!(
        late.len() >= 20 && late_done + 4 >= late.len(),
        "after the restart {late_done} of {} completed ({report})",
        late.len()
    );
    let waited_out = seen.iter().filter(|s| s.took >= TIMEOUT).count();
    assert!(
        waited_out <= 1,
        "{waited_out} calls waited the whole timeout ({report})"
    );
    // The upstream's journal: nothing applied twice; every completed call applied once, every
    // failed one never.
    let mut applied: HashMap<String, usize> = HashMap::new();
    for c in Journal::calls(&journal) {
        *applied
            .entry(c.execution_id.unwrap_or_default())
            .or_default() += 1;
    }
    assert!(
        applied.values().all(|&n| n == 1),
        "applied twice: {applied:?}"
    );
    for s in &seen {
        let times = applied.get(&s.id).copied().unwrap_or(0);
        match s.state.as_str() {
            "completed" => assert_eq!(times, 1, "{} completed ({report})", s.id),
            "failed" => assert_eq!(times, 0, "{} failed but was applied ({report})", s.id),
            _ => {}
        }
    }
    eprintln!("restart under load: {report}");
    served.stop();
}

/// server-everything over Streamable HTTP (the TypeScript SDK) answers a request in a session
/// it does not know with HTTP 400 and an error naming no request: nothing was taken, so the link
/// opens a new session at once and the call is sent on it, once, and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_typescript_upstream_is_relinked_without_waiting_out_a_timeout() {
    let node = NodeClients::require();
    let everything = node
        .package("@modelcontextprotocol/server-everything")
        .join("dist/index.js");
    let addr = free_addr();
    let port = addr.rsplit_once(':').unwrap().1.to_string();
    let start = || {
        let mut c = node.node(&everything);
        c.arg("streamableHttp")
            .env("PORT", &port)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c.spawn().unwrap()
    };
    let mut server = start();
    let dir = Dir::new("up-restart-ts");
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    let config = format!(
        "{GATEWAY}tools = [\"ev_*\"]\n\n[[operator]]\nname = \"alice\"\ntoken = {{ file = \"alice.token\" }}\n\n[upstream.ev]\nurl = \"http://{addr}/mcp\"\nexpose = \"all\"\ndefault_class = \"read_only\"\ntimeout = \"5s\"\n"
    );
    let served = Served::start(&dir.0, &config);
    wait_available(&served.url, "ev_echo").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let echo = |m: &str| mcp.call("ev_echo", json!({"message": m}), json!({}));
    assert_eq!(execution(&echo("before").await)["state"], "completed");
    server.kill().unwrap();
    server.wait().unwrap();
    // `postern status` says what is true: down while the server is gone (its event stream
    // ends and the next connection is refused), up again once it is back.
    let says = |wanted: &'static str| {
        let served = &served;
        async move {
            let mut last = String::new();
            for _ in 0..100 {
                let (_, out, err) = operator(served, &["status"]);
                if out
                    .lines()
                    .any(|l| l.starts_with("upstream") && l.contains(wanted))
                {
                    return;
                }
                last = format!("{out}{err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("postern status never said {wanted:?}:\n{last}");
        }
    };
    says("ev DOWN").await;
    let mut server = start();
    // Wait until the new server listens.
    for _ in 0..100 {
        if std::net::TcpStream::connect(&addr).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = Instant::now();
    let first = echo("after").await;
    let state = execution(&first)["state"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The restarted server did not take it in the old session: it is sent once on the new one.
    assert_eq!(
        state, "completed",
        "the first call after the restart: {first}"
    );
    assert!(
        started.elapsed() < TIMEOUT,
        "it waited {:?}: {first}",
        started.elapsed()
    );
    let next = echo("again").await;
    assert_eq!(execution(&next)["state"], "completed", "{next}");
    says("ev up").await;
    server.kill().unwrap();
    let _ = server.wait();
    served.stop();
}

/// A stdio upstream whose answer is one line longer than a client may take (17 MB, over
/// rmcp's 16 MiB, which would drop it silently and leave the call to wait its timeout): the
/// link is ended at once, the call is decided now with why, and the upstream is started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_stdio_line_ends_the_call_at_once_with_why() {
    crate::interop::require_sdk().await;
    let dir = Dir::new("up-long-line");
    let script = crate::foreign::repo_root().join("tests/interop/python_huge_line.py");
    let config = format!(
        // Unsandboxed: the server is on the Python SDK, installed in root's own Python (out of
        // the sandbox user's reach when the tests run as root); the sandbox has tests of its own.
        "{GATEWAY}tools = [\"py_*\"]\n\n[upstream.py]\ncommand = [\"python3\", {:?}]\nexpose = \"all\"\ntimeout = \"30s\"\nsandbox = \"off\"\n",
        script.to_str().unwrap()
    );
    let served = Served::start(&dir.0, &config);
    wait_available(&served.url, "py_huge").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let started = Instant::now();
    let resp = mcp
        .call("py_huge", json!({"size": 17_000_000}), json!({}))
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "the call waited {took:?}");
    // A tool with an outputSchema: an outcome without its answer is an error result, the
    // record in `_meta`.
    let record = &resp["result"]["_meta"]["io.postern/execution"];
    assert_eq!(record["state"], "outcome_unknown", "{resp:.600}");
    assert_eq!(resp["result"]["isError"], true, "{resp:.600}");
    // The record says why.
    let id = record["execution_id"].as_str().unwrap().to_string();
    let status = mcp
        .call("execution_status", json!({"execution_id": id}), json!({}))
        .await
        .to_string();
    assert!(
        status.contains("on one line") && status.contains("16777215"),
        "{status:.1500}"
    );
    // The upstream is started again and serves the next call.
    wait_available(&served.url, "py_small").await;
    let next = mcp.call("py_small", json!({}), json!({})).await;
    // A tool with an outputSchema: the record is in `_meta`, its structured content its own.
    assert_eq!(
        next["result"]["_meta"]["io.postern/execution"]["state"], "completed",
        "{next}"
    );
    assert_eq!(
        next["result"]["structuredContent"],
        json!({"result": "small"})
    );
    served.stop();
}

/// A client with a session is told its tool list changed when an upstream's link goes down
/// and when it comes back (the listed tools are unavailable, then available): the client
/// lists again instead of calling tools that are not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hears_its_tool_list_change_when_an_upstream_goes_and_comes_back() {
    use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
    use rmcp::service::NotificationContext;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::{ClientHandler, RoleClient, ServiceExt};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Listener(Arc<AtomicUsize>);
    impl ClientHandler for Listener {
        fn get_info(&self) -> ClientConfig {
            ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("list-changed-test", "1.0"),
            )
        }
        async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    let dir = Dir::new("up-list-changed");
    let journal = crate::upstream::upstream_journal(&dir.0);
    let config = format!(
        "{HEADER}\n{}\n{TOOLS}",
        crate::upstream::stdio_upstream(&journal)
    );
    let served = Served::start(&dir.0, &config);
    wait_listed(&served.url).await;
    let heard = Listener::default();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served.url.clone())
            .auth_header(BILLING_TOKEN.to_string()),
    );
    let client = heard.clone().serve(transport).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = heard.0.load(Ordering::SeqCst);
    // kill -9 the upstream's process: the gateway restarts it.
    let pid = Journal::last_pid(&journal).unwrap();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while heard.0.load(Ordering::SeqCst) < before + 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let told = heard.0.load(Ordering::SeqCst) - before;
    assert!(told >= 2, "told {told} times (down, then up)");
    // And it is back: the tools are there to call.
    wait_listed(&served.url).await;
    client.cancel().await.unwrap();
    served.stop();
}

//! `--ssh`: a trivial remote command on a real OpenSSH sshd on loopback (started for the run
//! by `postern_testkit::sshd`), run through Postern (a `remote_command` tool: two ledger
//! commits and the durable marker protocol on the host) and over a bare russh exec on one kept
//! connection, at concurrency 1 and 16, in one run.
//!
//!     cargo build --release -p postern && \
//!     cargo run --release -p postern-gateway-load -- --ssh [--calls N1,N16]
//!
//! Defaults: 300 calls at c=1, 1200 at c=16 (after the warm-up calls).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use postern_testkit::sshd::Sshd;
use russh::client::{self, Handle};
use russh::keys::{PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use serde_json::json;

use crate::upstream::{measure_calls, print_header, print_row, Op};
use crate::{Run, Served, WARMUP_PER_WORKER};

/// The bench's own sshd: any key it shows is accepted (the channel's pinning is tested
/// elsewhere; here only the cost of an exec is measured).
struct Trusting;

impl client::Handler for Trusting {
    type Error = russh::Error;
    async fn check_server_key(&mut self, _: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// A bare russh connection, TCP_NODELAY as the SSH channel's.
async fn bare_connection(sshd: &Sshd) -> Handle<Trusting> {
    let config = Arc::new(client::Config {
        nodelay: true,
        ..Default::default()
    });
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", sshd.port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut handle = client::connect_stream(config, tcp, Trusting).await.unwrap();
    let key = russh::keys::load_secret_key(&sshd.client_key, None).unwrap();
    let auth = handle
        .authenticate_publickey(&sshd.user, PrivateKeyWithHashAlg::new(Arc::new(key), None))
        .await
        .unwrap();
    assert!(auth.success(), "the bench's key was refused");
    handle
}

/// `command` once on a new exec channel of `handle`; panics unless it exits 0.
async fn bare_exec(handle: &Handle<Trusting>, command: &str) {
    let mut channel = handle.channel_open_session().await.unwrap();
    channel.exec(true, command).await.unwrap();
    let mut code = None;
    while let Some(msg) = channel.wait().await {
        if let russh::ChannelMsg::ExitStatus { exit_status } = msg {
            code = Some(exit_status);
        }
    }
    assert_eq!(code, Some(0), "{command}");
}

async fn measure_bare(handle: Arc<Handle<Trusting>>, concurrency: usize, calls: usize) -> Run {
    for _ in 0..concurrency * WARMUP_PER_WORKER {
        bare_exec(&handle, "true").await;
    }
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (next, handle) = (next.clone(), handle.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < calls {
                    let t = Instant::now();
                    bare_exec(&handle, "true").await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    finish(workers, started).await
}

async fn finish(
    workers: Vec<tokio::task::JoinHandle<Vec<std::time::Duration>>>,
    started: Instant,
) -> Run {
    let mut latencies = Vec::new();
    for w in workers {
        latencies.extend(w.await.unwrap());
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Run { latencies, rate }
}

pub fn run(rt: &tokio::runtime::Runtime, postern: &Path, dir: &Path, calls: (usize, usize)) {
    let sshd = Sshd::start(dir);
    let config = format!(
        r#"
[gateway]
store = "sqlite://ledger.db"
fingerprint_key = {{ file = "fp.key" }}
signing_key = {{ file = "signing.key" }}

[[actor]]
name = "bench"
token = {{ file = "bench.token" }}

[credential.host]
kind = "ssh_key"
secret = {{ file = {key:?} }}

[[tool]]
name = "run"
class = "remote_command"
match_window = "0s"
input_schema = {{ type = "object", required = ["n"], properties = {{ n = {{ type = "string" }} }} }}
ssh = {{ host = "127.0.0.1", port = {port}, user = {user:?}, host_key = {host_key:?}, credential = "host", marker_dir = {markers:?}, command = "true {{n}}" }}
"#,
        key = sshd.client_key.to_str().unwrap(),
        port = sshd.port,
        user = sshd.user,
        host_key = sshd.host_key,
        markers = dir.join("markers").to_str().unwrap(),
    );
    let gw_dir = dir.join("postern");
    std::fs::create_dir_all(&gw_dir).unwrap();
    let served = Served::start_with(postern, &gw_dir, config, &[]);
    let handle = Arc::new(rt.block_on(bare_connection(&sshd)));
    println!("a trivial remote command (`true`) on a loopback OpenSSH sshd");
    print_header("calls/s");
    let mut results = std::collections::HashMap::new();
    for (c, n) in [(1, calls.0), (16, calls.1)] {
        let bare = rt.block_on(measure_bare(handle.clone(), c, n));
        let run = |n: &str| Op::Call("run", json!({ "n": n }));
        let through = rt.block_on(measure_calls(
            &served.url,
            c,
            n,
            &format!("c{c}"),
            true,
            run,
        ));
        for (route, r) in [("bare", bare), ("postern", through)] {
            print_row(route, c, &r);
            results.insert((route, c), r);
        }
    }
    let p50 = |route, c| results[&(route, c)].pct(0.5);
    println!(
        "c=1: Postern adds {:.2} ms to a bare exec's p50 (goal: <= 1.5 ms plus the two commits); c=16: {:.0} commands/s through Postern (goal >= 300), {:.2}x the bare exec's",
        p50("postern", 1) - p50("bare", 1),
        results[&("postern", 16)].rate,
        results[&("postern", 16)].rate / results[&("bare", 16)].rate
    );
}

//! `--telemetry [--rounds N]` (issue 17): what metrics, logs and spans cost.
//!
//! The same build three ways, alternately A B C per round so that drift on a shared machine
//! falls on all: A as shipped (Prometheus recorder, logs at info, no span export), B with
//! `POSTERN_MEASURE_WITHOUT_TELEMETRY=1` (no recorder, no subscriber: the baseline), C with
//! `[telemetry] otlp_endpoint` set to an OTLP sink in this process that answers every export
//! 200 (every call's spans are built, batched, encoded and posted). c=64 calls/s for the given
//! seconds, and c=1 p50; printed as A/B and C/B.

use std::path::Path;

use postern_demo::target::InvoiceApi;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{config, Served};

pub async fn compare(postern: &Path, dir: &Path, seconds: f64, calls: usize, rounds: usize) {
    let api = InvoiceApi::start().await.unwrap();
    let target = format!("http://{}", api.addr);
    let sink = otlp_sink().await;
    println!("metrics, logs and spans: A as shipped (no span export), B without telemetry, C exporting spans over OTLP/HTTP; A B C per round");
    let mut rows: Vec<(&str, f64, f64)> = Vec::new();
    for round in 0..rounds {
        for name in ["A", "B", "C"] {
            let start = |level: &str| {
                let sub = dir.join(format!("tel-{name}-{round}-{level}"));
                std::fs::create_dir_all(&sub).unwrap();
                let mut text = config(&target, "10m", None);
                if name == "C" {
                    text.push_str(&format!(
                        "\n[telemetry]\notlp_endpoint = \"http://{sink}\"\n"
                    ));
                }
                let env: &[(&str, &str)] = if name == "B" {
                    &[("POSTERN_MEASURE_WITHOUT_TELEMETRY", "1")]
                } else {
                    &[]
                };
                Served::start_with(postern, &sub, text, env)
            };
            let (c1, c64) = super::approvals::ab_round(&api.state, start, calls, seconds).await;
            println!("  round {round} {name}: c=1 p50 {c1:.3} ms, c=64 {c64:.0} calls/s");
            rows.push((name, c1, c64));
        }
    }
    let mean = |who: &str, f: fn(&(&str, f64, f64)) -> f64| super::mean_of(&rows, who, f);
    let (a1, b1, c1) = (mean("A", |r| r.1), mean("B", |r| r.1), mean("C", |r| r.1));
    let (a64, b64, c64) = (mean("A", |r| r.2), mean("B", |r| r.2), mean("C", |r| r.2));
    println!(
        "  c=64 calls/s: A {a64:.0}, B {b64:.0}, C {c64:.0}; A/B {:.3} (goal ≥ 0.97), C/B {:.3}",
        a64 / b64,
        c64 / b64
    );
    println!(
        "  c=1 p50: A {a1:.3} ms, B {b1:.3} ms, C {c1:.3} ms; A/B {:.3}, C/B {:.3}",
        a1 / b1,
        c1 / b1
    );
}

/// A TCP server answering every HTTP/1.1 request `200` with an empty body (the collector's
/// side of an export), reading each request's body by its content-length.
async fn otlp_sink() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 16384];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < end + 4 + length {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..end + 4 + length);
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if conn.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

//! Issue 49 point 5: behind a load balancer every connection comes from its address. With
//! `[gateway] trusted_proxies`, a real HAProxy (`send-proxy-v2`) in front, the per-address cap
//! counts the clients the PROXY header names: one client at its cap is refused while another,
//! through the same balancer, is served. A PROXY header (v1 too) from a trusted address is
//! read; one from any other address is refused, and a trusted address that sends none is closed.

use std::time::Duration;

use postern_testkit::balancer::Haproxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{Dir, Served};
use crate::limits::{bounded, connect_from, healthz_on, HEALTHZ};

/// What the gateway answers on `conn` to `/healthz` after `preface`: the answer's text, or
/// empty when it closed the connection unanswered.
async fn answer_after(conn: &mut tokio::net::TcpStream, preface: &[u8]) -> String {
    let mut request = preface.to_vec();
    request.extend_from_slice(HEALTHZ);
    let _ = conn.write_all(&request).await;
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        while !seen.ends_with(b"\r\n\r\nok") {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            if seen.starts_with(b"HTTP/1.1 503") && seen.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    });
    read.await.expect("answered or closed within 10 s");
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_the_per_address_cap_counts_the_real_clients() {
    let dir = Dir::new("proxy-protocol");
    let served = Served::start(
        &dir.0,
        &bounded(
            "max_connections = 64\nmax_connections_per_address = 3\ntrusted_proxies = [\"127.0.0.1\"]",
        ),
    );
    let lb = Haproxy::proxy_v2(served.addr());
    let lb_addr = lb.addr.to_string();
    // Client A (127.0.0.2), an agent, through the balancer: its 3 connections authenticate and
    // are kept.
    let authenticated = format!(
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\r\n",
        crate::harness::BILLING_TOKEN
    );
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = connect_from([127, 0, 0, 2], &lb_addr).await.unwrap();
        conn.write_all(authenticated.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        conn.read_exact(&mut head).await.unwrap();
        assert!(head.ends_with(b"200"), "{head:?}");
        held.push(conn);
    }
    // Its fourth is over its own cap (no connection of the address is anonymous, to give way).
    let mut fourth = connect_from([127, 0, 0, 2], &lb_addr).await.unwrap();
    let refused = answer_after(&mut fourth, b"").await;
    assert!(
        refused.starts_with("HTTP/1.1 503") && refused.contains("max_connections_per_address"),
        "{refused}"
    );
    // Client B (127.0.0.3) through the same balancer is another address: served. Without the
    // PROXY protocol both are the balancer's one address, and B is refused.
    let mut b = connect_from([127, 0, 0, 3], &lb_addr).await.unwrap();
    assert!(healthz_on(&mut b).await.starts_with("HTTP/1.1 200"));

    // A trusted address may send a v1 header itself (HAProxy's `send-proxy`).
    let mut v1 = connect_from([127, 0, 0, 1], served.addr()).await.unwrap();
    let told = answer_after(&mut v1, b"PROXY TCP4 127.0.0.9 127.0.0.1 40000 8750\r\n").await;
    assert!(told.starts_with("HTTP/1.1 200"), "{told}");
    // A trusted address that sends no header is closed unanswered: every connection from a
    // proxy must say whose it is.
    let mut bare = connect_from([127, 0, 0, 1], served.addr()).await.unwrap();
    assert_eq!(answer_after(&mut bare, b"").await, "");
    // Anyone else who sends a PROXY header is refused: a client does not choose the address
    // it is counted under.
    let mut forged = connect_from([127, 0, 0, 5], served.addr()).await.unwrap();
    assert_eq!(
        answer_after(
            &mut forged,
            b"PROXY TCP4 127.0.0.77 127.0.0.1 40000 8750\r\n"
        )
        .await,
        ""
    );
    // A client behind the balancer that sends its own header after HAProxy's is refused too.
    let mut nested = connect_from([127, 0, 0, 6], &lb_addr).await.unwrap();
    assert_eq!(
        answer_after(
            &mut nested,
            b"PROXY TCP4 127.0.0.78 127.0.0.1 40000 8750\r\n"
        )
        .await,
        ""
    );
    drop(held);
    drop(lb);
    served.stop();
}

/// Behind the balancer, the address the PROXY header names is the client's in the Sessions log
/// (`/ops/runs`) and in the audit record of the call (`accepted`'s detail), not the balancer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_the_sessions_log_and_the_audit_record_name_the_real_client() {
    use crate::harness::{Mcp, BILLING_TOKEN};
    let target = postern_demo::target::InvoiceApi::start().await.unwrap();
    let dir = Dir::new("proxy-recorded");
    let text = crate::harness::config(&format!("http://{}", target.addr)).replace(
        "[gateway]\n",
        "[gateway]\ntrusted_proxies = [\"127.0.0.1\"]\n",
    );
    let served = Served::start(&dir.0, &crate::limits::with_alice(&text, &dir));
    let lb = Haproxy::proxy_v2(served.addr());
    // The agent, at 127.0.0.2, reaches the gateway through the balancer only.
    let through_lb = format!("http://{}/mcp", lb.addr);
    let mcp = Mcp::connect_from([127, 0, 0, 2], &through_lb, BILLING_TOKEN).await;
    let args = serde_json::json!({"customer": "behind-lb", "amount": 5});
    let r = mcp
        .call("create_invoice", args, serde_json::json!({}))
        .await;
    assert!(r["result"].is_object(), "{r}");
    // The operator asks directly, from an address that is not a trusted proxy.
    let operator = crate::harness::http_from([127, 0, 0, 5]).build().unwrap();
    let runs =
        crate::harness::ops_get(&operator, &format!("http://{}/ops/runs", served.addr())).await;
    let run = runs["runs"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["run_id"] == mcp.run_id()))
        .unwrap_or_else(|| panic!("the run is in the Sessions log: {runs}"));
    assert_eq!(run["client_address"], "127.0.0.2", "{run}");
    let (_, accepted) = crate::harness::exported_acceptance(&dir.0, "create_invoice");
    assert!(
        accepted.contains("\"client_address\":\"127.0.0.2\""),
        "{accepted}"
    );
    drop(lb);
    served.stop();
}

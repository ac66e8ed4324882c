//! Issue 36: "was the answer lost after completion?" is answered truly. Raw HTTP/1.1 clients on
//! their own TCP connections call a real `postern serve` 32 at once; each reads the response up
//! to a point around the result event and closes at once: inside the result event, right after
//! it, after its chunk, after the stream's end. Every answer the gateway wrote out before the
//! client hung up is recorded `delivered`, never `delivery_failed`, and `activity trace` says
//! so; a client that hung up before the answer existed is recorded as a loss.

use std::time::Duration;

use postern_core::ExecutionId;
use postern_demo::target::{InvoiceApi, Mode};
use postern_ledger::{Ledger, LedgerOptions, ListFilter};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{activity, config, Dir, Served, BILLING_TOKEN};

/// Where a client stops reading and closes its connection.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// As soon as the result event has begun to arrive (its last bytes may still be unread).
    InsideEvent,
    /// Right after the result event's blank line.
    AfterEvent,
    /// After the chunk that carries it (`\r\n`).
    AfterChunk,
    /// After the chunked body's end (`0\r\n\r\n`).
    AfterStream,
    /// After the response head, before the answer exists (a slow target).
    BeforeAnswer,
}

const CUTS: [Cut; 4] = [
    Cut::InsideEvent,
    Cut::AfterEvent,
    Cut::AfterChunk,
    Cut::AfterStream,
];
const CLIENTS: usize = 32;
const CALLS_PER_CLIENT: usize = 32;

/// Calls `create_invoice` with operation key `key` on `session` over a new connection, reads up
/// to `cut`, and closes.
async fn call_and_cut(addr: &str, session: &str, key: &str, cut: Cut) {
    // A JSON-RPC id of its own: requests in flight on one session never share one.
    let body = json!({"jsonrpc": "2.0", "id": key, "method": "tools/call", "params": {
        "name": "create_invoice", "arguments": {"customer": key, "amount": 1},
        "idempotencyKey": key}})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {BILLING_TOKEN}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut seen: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if reached(&seen, cut) {
            break;
        }
        let n = tokio::time::timeout(Duration::from_secs(20), conn.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{key}: no answer; read so far:\n{}", lossy(&seen)))
            .unwrap();
        assert!(n > 0, "{key}: the gateway closed first:\n{}", lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    // Close at once, as a client that has what it wanted does.
    drop(conn);
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn reached(seen: &[u8], cut: Cut) -> bool {
    let Some(head_end) = find(seen, b"\r\n\r\n", 0) else {
        return false;
    };
    let result = find(seen, b"\"result\"", head_end);
    let event_end = result.and_then(|r| find(seen, b"\n\n", r));
    match cut {
        Cut::BeforeAnswer => find(seen, b"data:", head_end).is_some(),
        Cut::InsideEvent => result.is_some(),
        Cut::AfterEvent => event_end.is_some(),
        Cut::AfterChunk => event_end.is_some_and(|e| find(seen, b"\r\n", e + 2).is_some()),
        Cut::AfterStream => event_end.is_some() && seen.ends_with(b"0\r\n\r\n"),
    }
}

/// The execution reached by operation key `key`, once its delivery is recorded: its id and
/// whether the answer was delivered.
async fn delivery_of(ledger: &Ledger, key: &str) -> (ExecutionId, bool) {
    let filter = ListFilter {
        operation_key: Some(key.to_string()),
        limit: 2,
        ..Default::default()
    };
    for _ in 0..400 {
        let found = ledger.read().list(&filter).await.unwrap();
        assert!(found.len() <= 1, "{key}: one execution, found {found:?}");
        if let Some(s) = found.first() {
            let names: Vec<String> = ledger
                .read()
                .execution(s.id)
                .await
                .unwrap()
                .unwrap()
                .events
                .iter()
                .map(|e| e.body.event.name().to_string())
                .collect();
            let delivered = names.iter().any(|n| n == "delivered");
            let failed = names.iter().any(|n| n == "delivery_failed");
            if delivered || failed {
                assert!(!(delivered && failed), "{key}: both recorded: {names:?}");
                return (s.id, delivered);
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{key}: no delivery recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_written_out_is_delivered_however_soon_the_client_hangs_up() {
    use postern_demo::client::McpClient;
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("delivery-cuts");
    let text = config(&format!("http://{}", target.addr))
        .replace("response_timeout = \"1s\"", "response_timeout = \"10s\"");
    let served = Served::start(&dir.0, &text);
    let session = McpClient::connect(&served.url, BILLING_TOKEN, "delivery-probe")
        .await
        .unwrap();
    let session_id = session.session().to_string();

    // 32 clients at once, 32 calls each, every cut in turn: the race between the client's
    // close and the body's end is exercised under load.
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (addr, session) = (served.addr().to_string(), session_id.clone());
        clients.spawn(async move {
            for i in 0..CALLS_PER_CLIENT {
                let cut = CUTS[(c + i) % CUTS.len()];
                call_and_cut(&addr, &session, &format!("probe-{c}-{i}"), cut).await;
            }
        });
    }
    while let Some(done) = clients.join_next().await {
        done.unwrap();
    }
    let ledger = Ledger::open(&served.store(), LedgerOptions::default())
        .await
        .unwrap()
        .0;
    let mut lost = Vec::new();
    let mut some_delivered = None;
    for c in 0..CLIENTS {
        for i in 0..CALLS_PER_CLIENT {
            let key = format!("probe-{c}-{i}");
            let (id, delivered) = delivery_of(&ledger, &key).await;
            if delivered {
                some_delivered = Some(id);
            } else {
                lost.push((key, CUTS[(c + i) % CUTS.len()]));
            }
        }
    }
    let total = CLIENTS * CALLS_PER_CLIENT;
    println!(
        "{total} calls whose clients read the result and closed at once: {} recorded as not delivered",
        lost.len()
    );
    assert!(
        lost.is_empty(),
        "answers written out but recorded lost: {lost:?}"
    );
    let t = activity(&dir.0, &["trace", &some_delivered.unwrap().to_string()]);
    let a4 = t["answers"][3]["answer"].as_str().unwrap();
    assert!(a4.starts_with("No: the answer was delivered"), "{a4}");

    // A client gone before the answer existed lost it, and the record says so.
    for n in 0..3 {
        target
            .state
            .set_mode(Mode::SlowOnce(Duration::from_millis(700)));
        let key = format!("gone-{n}");
        call_and_cut(served.addr(), &session_id, &key, Cut::BeforeAnswer).await;
        let (id, delivered) = delivery_of(&ledger, &key).await;
        assert!(!delivered, "{key}: the client left before the answer");
        let t = activity(&dir.0, &["trace", &id.to_string()]);
        let a4 = t["answers"][3]["answer"].as_str().unwrap();
        assert!(a4.starts_with("Yes: the target completed"), "{a4}");
    }
}

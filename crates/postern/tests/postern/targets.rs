//! Where a request goes is the template's business, not the agent's: a real `postern serve` in
//! front of the invoice API, with a tool whose URL has an argument in its path.

use postern_demo::target::InvoiceApi;
use serde_json::json;

use crate::harness::{config, execution, Dir, Mcp, Served, BILLING_TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_cannot_steer_the_path_and_the_record_shows_where_it_went() {
    let target = InvoiceApi::start().await.unwrap();
    let base = format!("http://{}", target.addr);
    let text = format!(
        r#"{}
[[tool]]
name = "show_invoice"
description = "Show an invoice"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["id"], properties = {{ id = {{ type = "string" }} }} }}
http = {{ method = "GET", url = "{base}/invoices/{{id}}" }}
"#,
        config(&base)
    );
    let dir = Dir::new("steering");
    let served = Served::start(&dir.0, &text);
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;

    // `/invoices/..` would be resolved to `/` (and `/invoices/.` to `/invoices/`).
    for id in ["..", ".", ""] {
        let r = mcp
            .call("show_invoice", json!({ "id": id }), json!({}))
            .await;
        // A tool error the model can correct, nothing sent.
        assert_eq!(r["result"]["isError"], true, "{id:?}: {r}");
        let message = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(message.contains("placeholder(s) id"), "{message}");
        assert!(message.contains("nothing sent"), "{message}");
    }
    assert!(
        target.state.requests().is_empty(),
        "nothing reached the target"
    );

    // A real id goes where the template says, and the record says where.
    let r = mcp
        .call("show_invoice", json!({"id": "inv_1"}), json!({}))
        .await;
    let id = execution(&r)["execution_id"].as_str().unwrap().to_string();
    let seen = target.state.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/invoices/inv_1");
    let status = mcp
        .call("execution_status", json!({"execution_id": id}), json!({}))
        .await;
    let events = &status["result"]["structuredContent"]["response"]["events"];
    let dispatched = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "dispatched")
        .unwrap();
    assert_eq!(
        dispatched["detail"]["target"],
        json!({"method": "GET", "url": format!("{base}/invoices/inv_1")}),
        "{status}"
    );
    // Exactly one execution was recorded: the refused calls left no trace but their errors.
    let list = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["activity", "list", "--json", "--store"])
        .arg(format!("sqlite://{}", dir.0.join("ledger.db").display()))
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}

/// Issue 12: `activity show` printed a target's raw body to the terminal, escape sequences
/// included (and `-c` did not find a relative SQLite store). A raw HTTP target answers with a
/// terminal title sequence; the Activity log shows it escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_show_escapes_what_the_target_said() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let body = "\u{1b}]0;owned\u{7}\u{1b}[2Jhello";
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    let dir = Dir::new("activity-escape");
    let served = Served::start(&dir.0, &config(&format!("http://{addr}")));
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let r = mcp.call("list_invoices", json!({}), json!({})).await;
    let id = execution(&r)["execution_id"].as_str().unwrap().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["activity", "show", &id, "-c"])
        .arg(dir.0.join("postern.toml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("hello"), "{stdout}");
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
        "{stdout:?}"
    );
    assert!(stdout.contains("\\u{1b}]0;owned"), "{stdout}");
}

/// Issue 12: `activity` opened the store read-write (migrations, an instance row, the recovery
/// scan). Looking at the Activity log now leaves the file byte for byte as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_only_reads_the_store() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("activity-read-only");
    let served = Served::start(&dir.0, &config(&format!("http://{}", target.addr)));
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let r = mcp
        .call(
            "create_invoice",
            json!({"customer": "ro-co", "amount": 2}),
            json!({}),
        )
        .await;
    let id = execution(&r)["execution_id"].as_str().unwrap().to_string();
    served.stop();
    let db = dir.0.join("ledger.db");
    let wal = format!("{}-wal", db.display());
    let before = std::fs::read(&db).unwrap();
    let wal_before = std::fs::read(&wal).unwrap_or_default();
    let store = format!("sqlite://{}", db.display());
    for args in [
        vec!["activity", "list", "--store", &store],
        vec!["activity", "show", &id, "--json", "--store", &store],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_postern"))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
    }
    assert!(
        std::fs::read(&db).unwrap() == before,
        "activity changed the store"
    );
    assert!(
        std::fs::read(&wal).unwrap_or_default() == wal_before,
        "activity wrote {wal}"
    );
}

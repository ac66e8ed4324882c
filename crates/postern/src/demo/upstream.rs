//! The demo's upstream scene: an existing MCP server (the demo upstream, `postern demo-upstream`,
//! started by the gateway as a stdio child) re-exported under a contract. The agent's
//! connection drops while the upstream works; the upstream applied the call once (its journal
//! shows the execution id it was sent in `_meta`), and the retry is answered from the record.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use postern_demo::client::McpClient;
use postern_demo::upstream::Journal;
use serde_json::json;

use super::{heading, line, Demo};

/// The upstream's own directory, within the demo's (the gateway's config directory, which its
/// sandbox never opens but for this, granted by name): its journal, and, when the gateway runs
/// as root (its upstreams then run as `nobody`), a link to this binary that `nobody` may
/// execute wherever the binary was built or installed.
const UPSTREAM_DIR: &str = "upstream";

/// Where the demo upstream journals the calls it applied.
pub(super) fn journal(dir: &Path) -> PathBuf {
    dir.join(UPSTREAM_DIR).join("journal.jsonl")
}

/// The upstream and the tool of the scene, for the demo's config (its directory made in
/// `dir`).
pub(super) fn config(dir: &Path) -> Result<String> {
    let own = dir.join(UPSTREAM_DIR);
    std::fs::create_dir_all(&own)?;
    let mut exe = std::env::current_exe()?;
    if rustix::process::geteuid().is_root() {
        let link = own.join("postern");
        if std::fs::hard_link(&exe, &link).is_err() {
            std::fs::copy(&exe, &link)?;
        }
        exe = link;
        // `nobody` (the sandbox's user) writes the journal; the demo reads it as root.
        let nobody = postern_sandbox::User::lookup("nobody")?;
        std::os::unix::fs::chown(&own, Some(nobody.uid), Some(nobody.gid))?;
    }
    Ok(format!(
        r#"
[upstream.books]
command = [{:?}, "demo-upstream", "--journal", {:?}]
# Sandboxed like every stdio upstream: it may write its own directory, nothing else of ours.
sandbox = {{ write = [{UPSTREAM_DIR:?}] }}

[[tool]]
name = "book_invoice"
class = "irreversible"
match_window = "10m"
mcp = {{ server = "books", tool = "create_invoice" }}
"#,
        exe.display().to_string(),
        journal(dir).display().to_string()
    ))
}

fn show_journal(journal: &Path, customer: &str) {
    let calls: Vec<_> = Journal::calls(journal)
        .into_iter()
        .filter(|c| c.arguments["customer"] == customer)
        .collect();
    for c in &calls {
        line(format!(
            "upstream ← tools/call {}  _meta io.postern/execution-id: {}",
            c.tool,
            c.execution_id.as_deref().unwrap_or("(none)")
        ));
    }
    line(format!(
        "upstream   applied {} call(s) for {customer}",
        calls.len()
    ));
}

/// The scene, numbered `n`.
pub(super) async fn scene(
    n: u32,
    d: &Demo,
    journal: &Path,
    mcp_url: &str,
    token: &str,
) -> Result<()> {
    heading(
        n,
        "An upstream MCP server behind a contract: its answer is lost, the retry is answered from the record.",
    );
    line("upstream books = `postern demo-upstream`, a stdio child of the gateway (rmcp server)");
    line("tool     book_invoice = books/create_invoice under an irreversible contract");
    for _ in 0..50 {
        if Journal::last_pid(journal).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let args = json!({"customer": "umbrella", "amount": 310, "delay_ms": 600});
    let (id, body) = d.client.request("book_invoice", args.clone(), json!({}));
    line(format!(
        "agent  → tools/call book_invoice {args} (JSON-RPC id {id})"
    ));
    let cut = d.client.raw(&body, Some(Duration::from_millis(200))).await;
    line(format!(
        "agent  ✗ {} (the upstream was still working)",
        if cut.is_err() {
            "connection dropped after 200 ms"
        } else {
            "unexpectedly answered"
        }
    ));
    tokio::time::sleep(Duration::from_millis(800)).await;
    show_journal(journal, "umbrella");
    let client = McpClient::connect(mcp_url, token, "postern-demo-agent").await?;
    let (id, body) = client.request("book_invoice", args.clone(), json!({}));
    line(format!(
        "agent  → tools/call book_invoice {args} (JSON-RPC id {id})   ← the agent retries on a new connection"
    ));
    let resp = client.send(&body, None).await?;
    d.show_answer(&resp).await?;
    show_journal(journal, "umbrella");
    line("why      the same intent inside the window is the same execution: the upstream's stored result is");
    line("         returned, nothing is sent again. A cooperating upstream can also de-duplicate by the id in _meta.");
    Ok(())
}

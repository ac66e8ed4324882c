//! Issue 48, point 9: what the operator sees of an upstream's process and of why it is down.
//! A stdio upstream started through a wrapper (`sh -c`, as `npx` starts its server as a
//! child sharing the pipes) runs in a process group of its own: its pid is shown, the death of
//! the wrapper ends the link and stops the whole group (no orphaned server serving unseen), the
//! upstream is restarted, and a stopped gateway leaves nothing of the group behind. An HTTP
//! upstream that cannot be reached is DOWN with a sentence naming it, its URL and the cause,
//! never a Rust type path.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::foreign::NodeClients;
use crate::harness::{execution, operator, operator_json, write_private, Dir, Mcp, Served};
use crate::harness::{ALICE_TOKEN, BILLING_TOKEN};
use crate::upstream::{wait_available, GATEWAY};

const ALICE: &str = "\n[[operator]]\nname = \"alice\"\ntoken = { file = \"alice.token\" }\n";

/// The live processes (not zombies) of process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp …: comm may hold spaces, so read after its ')'.
        let after: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, r)| r)
            .split_whitespace()
            .collect();
        if after.len() > 2 && after[0] != "Z" && after[2] == pgid.to_string() {
            members.push(pid);
        }
    }
    members
}

/// Whether process `pid` is gone (or a zombie: dead, waiting to be reaped).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
    }
}

fn upstream<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["upstreams"]
        .as_array()
        .and_then(|u| u.iter().find(|u| u["name"] == name))
        .unwrap_or_else(|| panic!("no upstream {name} in {list}"))
}

async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_wrapper_takes_its_server_with_it_and_the_upstream_restarts() {
    let node = NodeClients::require();
    let everything = node
        .package("@modelcontextprotocol/server-everything")
        .join("dist/index.js");
    // The wrapper runs the server as its child (not `exec`: a command follows it).
    let script = format!(
        "{} {} stdio; echo the wrapper is done >&2",
        node.node_binary().to_str().unwrap(),
        everything.to_str().unwrap()
    );
    let dir = Dir::new("up-wrapper");
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    let config = format!(
        "{GATEWAY}tools = [\"ev_*\"]\n{ALICE}\n[upstream.ev]\ncommand = [\"/bin/sh\", \"-c\", {script:?}]\nexpose = \"all\"\ndefault_class = \"read_only\"\n"
    );
    let served = Served::start(&dir.0, &config);
    wait_available(&served.url, "ev_echo").await;
    let list = operator_json(&served, &["upstream", "list"]);
    let wrapper = upstream(&list, "ev")["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid shown: {list}")) as u32;
    let (_, out, _) = operator(&served, &["upstream", "list"]);
    assert!(out.contains(&format!("ev: up, pid {wrapper}")), "{out}");
    // The wrapper leads the group; the server is its child in it.
    let server = until("the server runs in the wrapper's group", || {
        group_members(wrapper).into_iter().find(|&p| p != wrapper)
    })
    .await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &wrapper.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // The orphaned server does not keep serving: the group is stopped.
    until("the wrapper's server is gone", || {
        gone(server).then_some(())
    })
    .await;
    assert_eq!(group_members(wrapper), Vec::<u32>::new());
    // Restarted as after any death, under a new pid.
    let again = until("the upstream is up again under a new pid", || {
        let list = operator_json(&served, &["upstream", "list"]);
        let u = upstream(&list, "ev");
        let pid = u["pid"].as_u64()? as u32;
        (u["down"].is_null() && pid != wrapper).then_some(pid)
    })
    .await;
    let (_, status, _) = operator(&served, &["status"]);
    assert!(
        status.contains(&format!("upstream     ev up (pid {again})")),
        "{status}"
    );
    wait_available(&served.url, "ev_echo").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let resp = mcp
        .call("ev_echo", json!({"message": "after"}), json!({}))
        .await;
    assert_eq!(execution(&resp)["state"], "completed", "{resp}");
    let members = group_members(again);
    assert!(members.len() >= 2, "the new group: {members:?}");
    // A stopped gateway leaves nothing of the group behind.
    served.stop();
    until(
        "the upstream's group is gone after the gateway stopped",
        || members.iter().all(|&p| gone(p)).then_some(()),
    )
    .await;
}

/// Answers every HTTP request with `response` (a whole HTTP/1.1 response); its address.
async fn answering(response: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(response.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_http_upstream_is_down_with_a_plain_reason() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let denied = answering("HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain\r\ncontent-length: 13\r\nconnection: close\r\n\r\nbad token :-(").await;
    let failing = answering("HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/html\r\ncontent-length: 12\r\nconnection: close\r\n\r\n<h1>oops</h1>").await;
    let dir = Dir::new("up-reasons");
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    let mut config = format!("{GATEWAY}{ALICE}");
    for (name, addr) in [
        ("refused", &closed),
        ("denied", &denied),
        ("failing", &failing),
    ] {
        config += &format!(
            "\n[upstream.{name}]\nurl = \"http://{addr}/mcp\"\nexpose = \"all\"\ndefault_class = \"read_only\"\n"
        );
    }
    let served = Served::start(&dir.0, &config);
    let expected = [
        ("refused", &closed, "connection refused"),
        ("denied", &denied, "HTTP 401 Unauthorized: bad token :-("),
        ("failing", &failing, "HTTP 500"),
    ];
    let list = until("every upstream is down with its reason", || {
        let list = operator_json(&served, &["upstream", "list"]);
        expected
            .iter()
            .all(|(name, _, _)| {
                upstream(&list, name)["down"]
                    .as_str()
                    .is_some_and(|d| d.contains("could not be initialized"))
            })
            .then_some(list)
    })
    .await;
    let (_, text, _) = operator(&served, &["upstream", "list"]);
    let (_, status, _) = operator(&served, &["status"]);
    for (name, addr, cause) in expected {
        let down = upstream(&list, name)["down"].as_str().unwrap();
        assert_eq!(
            down,
            format!("upstream {name} at http://{addr}/mcp could not be initialized: {cause}")
        );
        for shown in [&text, &status] {
            let line = shown
                .lines()
                .find(|l| l.contains(&format!("upstream {name} at")))
                .unwrap_or_else(|| panic!("{name} not shown:\n{shown}"));
            assert!(line.contains(cause), "{line}");
            assert!(
                !line.contains("::") && !line.contains("CountedProgress"),
                "a type path: {line}"
            );
        }
    }
    served.stop();
}

//! Issue 32, onboarding an existing client config: `postern init --from-mcp-json` reads a real
//! Claude Desktop config with three servers — the pinned npm reference servers
//! `server-everything` and `server-memory`, each with an `env` value, and the demo upstream
//! under a name that is not a valid upstream name — and writes a gateway config that holds none
//! of the file's values, printing the variables to set (values masked) and the host's one
//! change. `postern serve` starts on that config with those variables, and one tool of each
//! server answers through the HTTP front: the variables reached the servers, and each ran under
//! the default sandbox (server-memory writing the directory init allowed it).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use postern_core::config::Config;
use postern_core::ActionClass;
use postern_demo::upstream::Journal;
use serde_json::{json, Value};

use postern_testkit::unprivileged::{give_to_nobody, reachable};

use crate::foreign::NodeClients;
use crate::harness::{sse_message, Dir, Mcp, Served};

const AGENT_TOKEN: &str = "onboarded-agent-token-0123456789";
/// The value of server-everything's `env` in the host's file: a secret to the test.
const EVERYTHING_KEY: &str = "sk-everything-7f3a9c1e5b2d";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_from_mcp_json_puts_postern_in_front_of_a_hosts_servers() {
    let node = NodeClients::require();
    let package = |name: &str| {
        node.package(&format!("@modelcontextprotocol/{name}"))
            .join("dist/index.js")
    };
    let dir = Dir::new("onboard");
    // server-memory's file in a directory of its own (init allows it that directory), its
    // user's when the tests run as root (its upstream then runs as nobody).
    let memory_dir = dir.0.join("memory");
    std::fs::create_dir_all(&memory_dir).unwrap();
    give_to_nobody(&memory_dir);
    let memory_file = memory_dir.join("knowledge-graph.jsonl");
    let memory_file = memory_file.to_str().unwrap();
    let journal = crate::upstream::upstream_journal(&dir.0);
    let postern = reachable(Path::new(env!("CARGO_BIN_EXE_postern")));
    let host = json!({"mcpServers": {
        "everything": {
            "command": node.node_binary(),
            "args": [package("server-everything"), "stdio"],
            "env": {"EVERYTHING_API_KEY": EVERYTHING_KEY},
        },
        "memory": {
            "command": node.node_binary(),
            "args": [package("server-memory")],
            "env": {"MEMORY_FILE_PATH": memory_file},
        },
        "demo books": {
            "command": postern,
            "args": ["demo-upstream", "--journal", journal],
        },
    }});
    let file = dir.0.join("claude_desktop_config.json");
    std::fs::write(&file, serde_json::to_string_pretty(&host).unwrap()).unwrap();

    let gateway = dir.0.join("gateway");
    let vars = [
        ("POSTERN_AGENT_TOKEN", AGENT_TOKEN),
        ("POSTERN_UP_EVERYTHING_EVERYTHING_API_KEY", EVERYTHING_KEY),
        ("POSTERN_UP_MEMORY_MEMORY_FILE_PATH", memory_file),
    ];
    init_from(&file, &gateway, &vars);
    // init cannot know where the demo upstream writes (its --journal): the operator says so.
    let config = gateway.join("postern.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[upstream.demo_books.sandbox]\nwrite = [{:?}]\n",
        journal.parent().unwrap()
    ));
    std::fs::write(&config, text).unwrap();

    let served = Served::spawn_with_env(&gateway, "127.0.0.1:0", &vars);
    let mcp = Mcp::connect(&served.url, AGENT_TOKEN).await;
    wait_listed(
        &mcp,
        &[
            "everything_get-env",
            "memory_create_entities",
            "demo_books_create_invoice",
        ],
    )
    .await;

    // server-everything got its env value from the gateway's variable.
    let env = completed(mcp.call("everything_get-env", json!({}), json!({})).await);
    assert!(env["content"].to_string().contains(EVERYTHING_KEY), "{env}");
    // server-memory writes where its variable says.
    let entity = json!({"name": "Postern", "entityType": "gateway",
        "observations": ["onboarded from a Claude Desktop config"]});
    let created = completed(
        mcp.call(
            "memory_create_entities",
            json!({"entities": [entity]}),
            json!({}),
        )
        .await,
    );
    assert!(
        created["content"].to_string().contains("Postern"),
        "{created}"
    );
    let graph = std::fs::read_to_string(memory_file).unwrap();
    assert!(
        graph.contains("onboarded from a Claude Desktop config"),
        "{graph}"
    );
    // The demo upstream, under its made-up name, acted once.
    let invoice = completed(
        mcp.call(
            "demo_books_create_invoice",
            json!({"customer": "onboarded", "amount": 42}),
            json!({}),
        )
        .await,
    );
    let calls = Journal::calls(&journal);
    assert_eq!(calls.len(), 1, "{invoice}");
    assert_eq!(calls[0].arguments["customer"], "onboarded");
    served.stop();
}

/// `postern init --from-mcp-json file --dir gateway`, in a newcomer's shell: it names every
/// variable of `vars` and prints no value of them, nor writes one into the config, which parses
/// with every upstream served as irreversible.
fn init_from(file: &Path, gateway: &Path, vars: &[(&str, &str)]) {
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(["init", "--from-mcp-json", file.to_str().unwrap()])
        .args(["--dir", gateway.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    for (var, _) in vars {
        assert!(
            stdout.contains(&format!("export {var}=")),
            "{var}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("server \"demo books\" is upstream \"demo_books\""),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#""args": ["connect", "http://127.0.0.1:8750/mcp"]"#),
        "{stdout}"
    );
    assert!(stdout.contains("audit public key: "), "{stdout}");
    let written = std::fs::read_to_string(gateway.join("postern.toml")).unwrap();
    // The agent's token is the test's own; the others come from the host's file.
    for (_, secret) in &vars[1..] {
        assert!(!stdout.contains(secret), "{secret} printed:\n{stdout}");
        assert!(!stderr.contains(secret), "{secret} printed:\n{stderr}");
        assert!(!written.contains(secret), "{secret} in:\n{written}");
    }
    let config = Config::parse(&written, "postern.toml").unwrap();
    assert_eq!(
        config.upstreams.keys().collect::<Vec<_>>(),
        ["demo_books", "everything", "memory"]
    );
    for (name, upstream) in &config.upstreams {
        let all = upstream.expose_all.as_ref().unwrap();
        assert_eq!(all.template().class, ActionClass::Irreversible, "{name}");
    }
}

/// The result of a call the gateway recorded completed.
fn completed(response: Value) -> Value {
    let result = &response["result"];
    assert_eq!(
        result["_meta"]["io.postern/execution"]["state"], "completed",
        "{response}"
    );
    assert_ne!(result["isError"], true, "{response}");
    result.clone()
}

/// Waits (bounded) until every tool in `tools` is listed and available.
async fn wait_listed(mcp: &Mcp, tools: &[&str]) {
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let mut listed = Value::Null;
    for _ in 0..100 {
        let (_, body) = mcp.raw(&list, None).await.unwrap();
        listed = sse_message(&body);
        let available = |name: &&str| {
            listed["result"]["tools"].as_array().is_some_and(|all| {
                all.iter().any(|t| {
                    t["name"] == *name && t["_meta"].get("io.postern/unavailable").is_none()
                })
            })
        };
        if tools.iter().all(available) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not every one of {tools:?} became available: {listed}");
}

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
use std::time::{Duration, Instant};

use postern_core::config::Config;
use postern_core::ActionClass;
use postern_demo::upstream::Journal;
use rmcp::model::CallToolRequestParams;
use serde_json::{json, Value};

use postern_testkit::unprivileged::{give_to_nobody, reachable};

use crate::foreign::NodeClients;
use crate::harness::{sse_message, Dir, Mcp, Served};

const AGENT_TOKEN: &str = "onboarded-agent-token-0123456789";
const OPERATOR_TOKEN: &str = "onboarded-operator-token-0123456789";
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
        ("POSTERN_OPERATOR_TOKEN", OPERATOR_TOKEN),
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
/// variable of `vars` and prints no secret value of them (the memory file's path it shows
/// whole), nor writes one into the config, which parses with every upstream served as
/// irreversible but for the reads it names.
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
    let export = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("export "))
        .unwrap_or_else(|| panic!("no export command:\n{stdout}"));
    for (var, _) in vars {
        assert!(export.contains(&format!(" {var}=")), "{var}:\n{stdout}");
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
    // The tokens are the test's own; the others come from the host's file: the key is a
    // secret, the memory file's path is not (and is shown so that it can be copied).
    let (secret, path) = (vars[2].1, vars[3].1);
    assert!(!stdout.contains(secret), "{secret} printed:\n{stdout}");
    assert!(!stderr.contains(secret), "{secret} printed:\n{stderr}");
    for value in [secret, path] {
        assert!(!written.contains(value), "{value} in:\n{written}");
    }
    assert!(
        export.contains(&format!(" POSTERN_UP_MEMORY_MEMORY_FILE_PATH={path}")),
        "{export}"
    );
    let config = Config::parse(&written, "postern.toml").unwrap();
    assert_eq!(
        config.upstreams.keys().collect::<Vec<_>>(),
        ["demo_books", "everything", "memory"]
    );
    for (name, upstream) in &config.upstreams {
        let all = upstream.expose_all.as_ref().unwrap();
        assert_eq!(all.template().class, ActionClass::Irreversible, "{name}");
        // Issue 48: the generous call timeouts are written with the keys that change them.
        assert_eq!(upstream.timeout, Duration::from_secs(300), "{name}");
        assert_eq!(upstream.max_duration, Duration::from_secs(3600), "{name}");
    }
    assert!(
        written.contains("timeout = \"5m\"") && written.contains("max_duration = \"1h\""),
        "{written}"
    );
    assert!(
        stdout.contains(
            "a call waits up to 5m for its answer or its next progress report, 1h in all"
        ),
        "{stdout}"
    );
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

/// Issue 48: the whole onboarding of a Claude Desktop config naming server-everything,
/// server-filesystem and server-memory, as a user does it — `postern init`, the one `export`
/// command it prints, the `postern serve` it prints, the host's first call (rmcp's client) — in
/// at most 5 commands and 10 s from init to the first answer. The config it made names the
/// servers' reads (hyphenated or not), gives the operator its commands, and `serve --stdio`
/// starts without the operator's token it does not use. `activity list|show|trace` then say
/// the execution's state in one vocabulary, under aligned columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_desktop_config_is_onboarded_in_five_commands_and_ten_seconds() {
    let node = NodeClients::require();
    let package = |name: &str| {
        node.package(&format!("@modelcontextprotocol/{name}"))
            .join("dist/index.js")
    };
    let dir = Dir::new("onboard-timed");
    let (memory_dir, files) = (dir.0.join("memory"), dir.0.join("files"));
    for d in [&memory_dir, &files] {
        std::fs::create_dir_all(d).unwrap();
        give_to_nobody(d);
    }
    let memory_file = memory_dir.join("knowledge-graph.jsonl");
    let memory_file = memory_file.to_str().unwrap();
    let host = json!({"mcpServers": {
        "everything": {
            "command": node.node_binary(),
            "args": [package("server-everything"), "stdio"],
            "env": {"EVERYTHING_API_KEY": EVERYTHING_KEY},
        },
        "filesystem": {
            "command": node.node_binary(),
            "args": [package("server-filesystem"), files],
        },
        "memory": {
            "command": node.node_binary(),
            "args": [package("server-memory")],
            "env": {"MEMORY_FILE_PATH": memory_file},
        },
    }});
    let file = dir.0.join("claude_desktop_config.json");
    std::fs::write(&file, serde_json::to_string_pretty(&host).unwrap()).unwrap();
    let gateway = dir.0.join("gateway");
    let config = gateway.join("postern.toml");
    let config_arg = config.to_str().unwrap();

    let started = Instant::now();
    let mut commands = 0;
    // 1. postern init.
    commands += 1;
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["init", "--from-mcp-json", file.to_str().unwrap()])
        .args(["--dir", gateway.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 2. The one export command it prints, as a user fills it in: fresh tokens, the masked
    // value copied from the host's file.
    commands += 1;
    let export = stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("export "))
        .unwrap_or_else(|| panic!("no export command:\n{stdout}"));
    let vars = filled_in(export, &[EVERYTHING_KEY]);
    assert!(!vars.iter().any(|(_, v)| v.contains('…')), "{vars:?}");
    // 3. The serve command it prints (on a free port: tests run side by side).
    commands += 1;
    assert!(
        stdout.contains(&format!("then: postern serve -c {config_arg}\n")),
        "{stdout}"
    );
    let listen = free_address();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("\"127.0.0.1:8750\"", &format!("{listen:?}")),
    )
    .unwrap();
    let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let served = Served::spawn_with_env(&gateway, &listen, &env);
    // 4. The host's first call, through rmcp's client.
    commands += 1;
    let client = rmcp_client(&served.url, &vars).await;
    let tools = client.list_all_tools().await.unwrap();
    let args = json!({"a": 2, "b": 3}).as_object().unwrap().clone();
    let sum = client
        .call_tool(CallToolRequestParams::new("everything_get-sum").with_arguments(args))
        .await
        .unwrap();
    let elapsed = started.elapsed();
    println!(
        "onboarding: {commands} commands, {:.2} s from init to the first answer",
        elapsed.as_secs_f64()
    );
    assert!(
        serde_json::to_string(&sum.content).unwrap().contains('5'),
        "{sum:?}"
    );
    assert!(commands <= 5, "{commands} commands");
    assert!(elapsed <= Duration::from_secs(10), "{elapsed:?}");

    // The host sees the reads as reads.
    let listed = |name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} not listed"))
    };
    let hints = listed("everything_get-sum").annotations.clone().unwrap();
    assert_eq!(hints.read_only_hint, Some(true), "{hints:?}");
    assert_ne!(hints.destructive_hint, Some(true), "{hints:?}");
    assert_classes(&config);
    // The operator's view works with the operator the config names.
    let status = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(["status", "-c", config_arg])
        .env(
            "POSTERN_OPERATOR_TOKEN",
            &vars
                .iter()
                .find(|(k, _)| k == "POSTERN_OPERATOR_TOKEN")
                .unwrap()
                .1,
        )
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    client.cancel().await.unwrap();
    served.stop();

    stdio_needs_no_operator_token(&config, &vars).await;
    one_vocabulary(&config);
}

/// The generated config serves the servers' reads as reads, and their writes not.
fn assert_classes(config: &Path) {
    let parsed = Config::parse(&std::fs::read_to_string(config).unwrap(), "postern.toml").unwrap();
    let class = |upstream: &str, tool: &str| {
        let all = parsed.upstreams[upstream].expose_all.as_ref().unwrap();
        all.contract(&format!("{upstream}_{tool}"), tool).class
    };
    for (upstream, tool) in [
        ("everything", "get-sum"),
        ("everything", "get-env"),
        ("memory", "read_graph"),
        ("memory", "open_nodes"),
        ("filesystem", "directory_tree"),
    ] {
        assert_eq!(class(upstream, tool), ActionClass::ReadOnly, "{tool}");
    }
    for (upstream, tool) in [("memory", "create_entities"), ("filesystem", "write_file")] {
        assert_eq!(class(upstream, tool), ActionClass::Irreversible, "{tool}");
    }
}

/// `serve --stdio` on the config, without the operator's token: it starts and answers.
async fn stdio_needs_no_operator_token(config: &Path, vars: &[(String, String)]) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_postern"));
    command
        .args(["serve", "--stdio", "-c", config.to_str().unwrap()])
        .envs(
            vars.iter()
                .filter(|(k, _)| k != "POSTERN_OPERATOR_TOKEN")
                .cloned(),
        )
        .env_remove("POSTERN_OPERATOR_TOKEN")
        .stderr(std::process::Stdio::inherit());
    let mut agent = crate::stdio::StdioAgent::spawn(command);
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "onboarding", "version": "1"}});
    let hello = agent.request(1, "initialize", init).await;
    assert!(hello["result"].is_object(), "{hello}");
    agent
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let call = json!({"name": "everything_get-sum", "arguments": {"a": 4, "b": 5}});
    let answer = agent.request(2, "tools/call", call).await;
    assert!(
        answer["result"]["content"].to_string().contains('9'),
        "{answer}"
    );
    // The host closes the gateway's stdin: it stops, its upstreams with it.
    drop(agent.stdin);
    let exit = tokio::time::timeout(Duration::from_secs(30), agent.child.wait()).await;
    assert!(
        exit.is_ok_and(|e| e.unwrap().success()),
        "serve --stdio did not stop"
    );
}

/// `activity list`, `show` and `trace` name the first call's state alike, and the list's
/// columns stay aligned under its header whatever a tool's name.
fn one_vocabulary(config: &Path) {
    let activity = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_postern"))
            .arg("activity")
            .args(args)
            .args(["-c", config.to_str().unwrap()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let list = activity(&["list"]);
    let mut lines = list.lines();
    let header = lines.next().unwrap();
    let row = lines
        .find(|l| l.contains("everything_get-sum"))
        .unwrap_or_else(|| panic!("{list}"));
    let at = header.find("STATE").unwrap();
    let state = row[at..].split_whitespace().next().unwrap();
    let tool_at = header.find("TOOL").unwrap();
    assert!(row[tool_at..].starts_with("everything_get-sum"), "{list}");
    let id = row.split_whitespace().next().unwrap();
    let show = activity(&["show", id]);
    assert!(
        show.contains(&format!("state        {state}\n")),
        "{state}:\n{show}"
    );
    let trace = activity(&["trace", id]);
    assert!(
        trace.contains(&format!("state        {state}\n")),
        "{state}:\n{trace}"
    );
}

/// The variables of the `export` line init printed, filled in: `$(openssl rand -hex 24)` a
/// fresh token, a masked value (its start, then '…') the one of `secrets` it begins.
fn filled_in(export: &str, secrets: &[&str]) -> Vec<(String, String)> {
    const RANDOM: &str = "$(openssl rand -hex 24)";
    export
        .replace(RANDOM, "$(random)")
        .split_whitespace()
        .map(|assignment| {
            let (var, value) = assignment.split_once('=').unwrap();
            let value = value.trim_matches('\'');
            let value = match value.strip_suffix('…') {
                _ if value == "$(random)" => {
                    format!(
                        "{}-{}-0123456789abcdef",
                        var.to_lowercase(),
                        std::process::id()
                    )
                }
                Some(start) => secrets
                    .iter()
                    .find(|s| s.starts_with(start))
                    .unwrap_or_else(|| panic!("no secret for {assignment}"))
                    .to_string(),
                None => value.to_string(),
            };
            (var.to_string(), value)
        })
        .collect()
}

fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

async fn rmcp_client(
    url: &str,
    vars: &[(String, String)],
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;
    postern_channels::http::install_default_provider();
    let token = &vars
        .iter()
        .find(|(k, _)| k == "POSTERN_AGENT_TOKEN")
        .unwrap()
        .1;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header(token.clone()),
    );
    ().serve(transport).await.unwrap()
}

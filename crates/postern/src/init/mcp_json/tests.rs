//! The config `init --from-mcp-json` makes, and its refusals, without writing a file.

use postern_core::ActionClass;
use serde_json::{json, Value};

use super::variables::Shown;
use super::*;

fn make(doc: Value) -> Result<Onboarding> {
    Onboarding::from_text(&doc.to_string(), "host.json", super::super::STARTER)
}

fn error(doc: &str) -> String {
    Onboarding::from_text(doc, "host.json", super::super::STARTER)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_else(|| panic!("accepted: {doc}"))
}

#[test]
fn secrets_become_references_and_the_config_parses() {
    let o = make(json!({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"API_KEY": "sk-live-0123456789", "weird key": "value-of-weird"}},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer tok-0123456789"}},
        "keyed": {"type": "http", "url": "https://example.com/k/mcp", "headers": {"X-Api-Key": "xk-0123456789"}},
    }}))
    .unwrap();
    let c = o.config();
    for secret in [
        "sk-live-0123456789",
        "value-of-weird",
        "tok-0123456789",
        "xk-0123456789",
    ] {
        assert!(!c.contains(secret), "{secret} in\n{c}");
    }
    for want in [
        "API_KEY = { env = \"POSTERN_UP_FILES_API_KEY\" }",
        "\"weird key\" = { env = \"POSTERN_UP_FILES_WEIRD_KEY\" }",
        "[credential.remote]\nkind = \"bearer\"\nsecret = { env = \"POSTERN_UP_REMOTE_TOKEN\" }",
        "kind = \"header\"\nheader = \"X-Api-Key\"\nsecret = { env = \"POSTERN_UP_KEYED_X_API_KEY\" }",
        "credential = \"remote\"",
        "startup_timeout = \"2m\"",
        "default_class = \"irreversible\"",
    ] {
        assert!(c.contains(want), "{want} not in\n{c}");
    }
    let config = Config::parse(c, "postern.toml").unwrap();
    assert_eq!(config.upstreams.len(), 3);
    assert!(config.actor(AGENT).unwrap().may_call("remote_anything"));
    let hints: Vec<&str> = o
        .exports
        .iter()
        .filter_map(|e| match &e.shown {
            Shown::Masked(h) => Some(h.as_str()),
            Shown::Whole(_) => None,
        })
        .collect();
    assert!(hints.contains(&"sk…"), "{hints:?}");
    // The operator the operator's commands need, its token from the environment.
    assert_eq!(config.operators.len(), 1);
    assert_eq!(
        config.operators[0].token.as_ref().unwrap().to_string(),
        "env:POSTERN_OPERATOR_TOKEN"
    );
    // The read marked as the comment says parses.
    let marked = format!("{c}\n[[tool]]\nname = \"files_read_file\"\nclass = \"read_only\"\nmcp = {{ server = \"files\", tool = \"read_file\" }}\n");
    Config::parse(&marked, "postern.toml").unwrap();
}

#[test]
fn names_are_made_valid_and_prefixes_never_overlap() {
    let o = make(json!({"servers": {
        "a": {"command": "a"}, "a_b": {"command": "b"}, "a b": {"command": "c"},
        "": {"command": "d"}, "github": {"type": "stdio", "command": "e", "disabled": true},
    }}))
    .unwrap();
    assert_eq!(o.key, "servers");
    let names: Vec<&str> = o.made.iter().map(|m| m.name.as_str()).collect();
    assert!(
        names.contains(&"a_b_2") && names.contains(&"server"),
        "{names:?}"
    );
    assert!(
        o.notes
            .iter()
            .any(|n| n.contains("\"a b\" is upstream \"a_b_2\"")),
        "{:?}",
        o.notes
    );
    assert!(o
        .notes
        .iter()
        .any(|n| n.contains("\"disabled\" is not carried over")));
    // Config::parse (inside from_text) refuses overlapping prefixes; it accepted these.
    assert!(o.made.iter().any(|m| m.prefix == "a2_"), "{:?}", o.notes);
}

#[test]
fn bad_input_is_refused_clearly() {
    assert!(error("{not json").contains("host.json is not valid JSON"));
    assert!(error("[]").contains("not a JSON object"));
    assert!(error(r#"{"x": {}}"#).contains("no \"mcpServers\" object"));
    assert!(error(r#"{"mcpServers": []}"#).contains("not an object of servers"));
    assert!(error(r#"{"mcpServers": {}}"#).contains("names no server"));
    let e = error(r#"{"mcpServers": {"s": {"args": ["x"]}}}"#);
    assert!(e.contains("server \"s\": has neither \"command\""), "{e}");
    let e = error(r#"{"mcpServers": {"s": {"command": "x", "url": "http://h/mcp"}}}"#);
    assert!(e.contains("has both"), "{e}");
    let e = error(r#"{"mcpServers": {"s": {"type": "sse", "url": "http://h/sse"}}}"#);
    assert!(e.contains("server \"s\": SSE transport is not supported; use the server's Streamable HTTP endpoint"), "{e}");
    let e = error(r#"{"servers": {"s": {"type": "http", "command": "x"}}}"#);
    assert!(e.contains("does not go with a \"command\""), "{e}");
    let e = error(
        r#"{"mcpServers": {"gh": {"url": "https://h/mcp", "headers": {"A": "secret-a", "B": "secret-b"}}}}"#,
    );
    assert!(e.contains("server \"gh\": sends 2 headers (A, B)"), "{e}");
    assert!(!e.contains("secret-a"), "{e}");
    let e = error(r#"{"mcpServers": {"s": {"url": "https://u:pw-0123456789@h/mcp"}}}"#);
    assert!(
        e.contains("holds a user name and password") && !e.contains("pw-"),
        "{e}"
    );
    let e = error(r#"{"mcpServers": {"s": {"command": "x", "env": {"K": 1}}}}"#);
    assert!(e.contains("env.K is not a string"), "{e}");
}

#[test]
fn known_servers_get_the_directories_they_write_in_their_sandbox() {
    use postern_core::config::{Sandbox, UpstreamTransport};
    let o = make(json!({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv/a", "/srv/b"]},
        "memory": {"command": "/usr/bin/node", "args": ["/opt/mcp/node_modules/@modelcontextprotocol/server-memory/dist/index.js"],
                   "env": {"MEMORY_FILE_PATH": "/var/lib/memory/graph.jsonl"}},
        "memory_default": {"command": "node", "args": ["/opt/mcp/node_modules/@modelcontextprotocol/server-memory/dist/index.js"]},
        "other": {"command": "other-server"},
    }}))
    .unwrap();
    let config = Config::parse(o.config(), "postern.toml").unwrap();
    let writes = |name: &str| match &config.upstreams[name].transport {
        UpstreamTransport::Stdio {
            sandbox: Sandbox::On { write, read, user },
            ..
        } => {
            assert!(read.is_empty() && user.is_none(), "{name}");
            write.clone()
        }
        other => panic!("{name}: {other:?}"),
    };
    let mut files = vec!["/srv/a".to_string(), "/srv/b".to_string()];
    if let Some(home) = std::env::var_os("HOME") {
        files.insert(0, Path::new(&home).join(".npm").display().to_string());
    }
    assert_eq!(writes("files"), files);
    assert_eq!(writes("memory"), ["/var/lib/memory"]);
    assert_eq!(
        writes("memory_default"),
        ["/opt/mcp/node_modules/@modelcontextprotocol/server-memory/dist"]
    );
    assert!(writes("other").is_empty());
    assert!(
        o.config().contains("#   [upstream.other.sandbox]"),
        "{}",
        o.config()
    );
}

#[test]
fn a_path_is_shown_and_a_secret_masked() {
    let o = make(
        json!({"mcpServers": {"memory": {"command": "node", "args": ["m.js"], "env": {
            "MEMORY_FILE_PATH": "/tmp/memory/knowledge-graph.jsonl",
            "PORT": "8080",
            "API_KEY": "/looks/like/a/path/but/the/key/says/secret",
            "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_0123456789abcdef",
            "DSN": "postgres://user:pw@db/x",
        }}}}),
    )
    .unwrap();
    let shown: BTreeMap<&str, String> = o
        .exports
        .iter()
        .map(|e| {
            let s = match &e.shown {
                Shown::Whole(v) => format!("whole {v}"),
                Shown::Masked(h) => format!("masked {h}"),
            };
            (e.var.as_str(), s)
        })
        .collect();
    assert_eq!(
        shown["POSTERN_UP_MEMORY_MEMORY_FILE_PATH"],
        "whole /tmp/memory/knowledge-graph.jsonl"
    );
    assert_eq!(shown["POSTERN_UP_MEMORY_PORT"], "whole 8080");
    assert_eq!(shown["POSTERN_UP_MEMORY_API_KEY"], "masked /l…");
    assert_eq!(
        shown["POSTERN_UP_MEMORY_GITHUB_PERSONAL_ACCESS_TOKEN"],
        "masked gh…"
    );
    assert_eq!(shown["POSTERN_UP_MEMORY_DSN"], "masked po…");
}

/// The tools server-everything, server-memory and server-filesystem list (names and the
/// annotations that matter), as init would get them.
fn listed(tools: &[(&str, Option<Value>)]) -> Result<Vec<classify::Listed>, String> {
    Ok(tools
        .iter()
        .map(|(name, annotations)| classify::Listed {
            name: name.to_string(),
            annotations: annotations.clone(),
        })
        .collect())
}

#[test]
fn listed_tools_are_named_reads_with_why_and_the_gateway_serves_them_so() {
    let made = make(json!({"mcpServers": {
        "everything": {"command": "node", "args": ["e.js"]},
        "memory": {"command": "node", "args": ["m.js"]},
        "silent": {"command": "node", "args": ["s.js"]},
    }}))
    .unwrap();
    let read = json!({"readOnlyHint": true});
    let mut tools = ListedTools::new();
    tools.insert(
        "everything".into(),
        listed(&[
            ("get-sum", Some(read.clone())),
            ("get-env", None),
            (
                "toggle-simulated-logging",
                Some(json!({"readOnlyHint": false})),
            ),
        ]),
    );
    tools.insert(
        "memory".into(),
        listed(&[
            ("read_graph", Some(read)),
            ("open_nodes", None),
            ("create_entities", Some(json!({"readOnlyHint": false}))),
            ("delete_entities", Some(json!({"destructiveHint": true}))),
        ]),
    );
    tools.insert("silent".into(), Err("no answer within 5s".into()));
    let o = made.with_tools(&tools).unwrap();
    let c = o.config();
    // Each line names a tool and ends with why: reads in the list, the others commented.
    let line = |start: &str| {
        c.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line {start} in\n{c}"))
            .to_string()
    };
    for (start, why) in [
        ("\"get-sum\",", "# readOnlyHint: true"),
        ("\"get-env\",", "# name starts with get-"),
        ("#   \"toggle-simulated-logging\"", "# readOnlyHint: false"),
        ("\"open_nodes\",", "# name starts with open_"),
        ("#   \"delete_entities\"", "# destructiveHint: true"),
    ] {
        assert!(line(start).ends_with(why), "{start}: {why} in\n{c}");
    }
    assert!(c.contains("(no answer within 5s)"), "{c}");
    let config = Config::parse(c, "postern.toml").unwrap();
    let class = |upstream: &str, tool: &str| {
        let all = config.upstreams[upstream].expose_all.as_ref().unwrap();
        all.contract(&format!("{upstream}_{tool}"), tool).class
    };
    assert_eq!(class("everything", "get-sum"), ActionClass::ReadOnly);
    assert_eq!(class("everything", "get-env"), ActionClass::ReadOnly);
    assert_eq!(
        class("everything", "toggle-simulated-logging"),
        ActionClass::Irreversible
    );
    // A tool listed later is not a read until the operator says so.
    assert_eq!(class("everything", "get-later"), ActionClass::Irreversible);
    assert_eq!(class("memory", "open_nodes"), ActionClass::ReadOnly);
    assert_eq!(
        class("memory", "create_entities"),
        ActionClass::Irreversible
    );
    // A server that did not answer keeps the patterns, either separator matching.
    assert_eq!(class("silent", "get-sum"), ActionClass::ReadOnly);
    assert_eq!(class("silent", "list_things"), ActionClass::ReadOnly);
    assert_eq!(class("silent", "write_file"), ActionClass::Irreversible);
}

//! The config `init --from-mcp-json` makes, and its refusals, without writing a file.

use serde_json::json;

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
    let hints: Vec<&str> = o.exports.iter().map(|e| e.hint.as_str()).collect();
    assert!(hints.contains(&"sk…"), "{hints:?}");
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

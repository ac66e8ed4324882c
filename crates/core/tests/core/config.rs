//! The configuration format and tool-contract validation.

use std::time::Duration;

use postern_core::class::{ActionClass, RecoveryMethod};
use postern_core::config::{
    Config, ConfigError, EnvValue, SecretRef, SessionApproval, UpstreamTransport,
};

use crate::support::{config, CONFIG};

fn parse_err(text: &str) -> ConfigError {
    Config::parse(text, "bad.toml").unwrap_err()
}

const GATEWAY: &str = "[gateway]\nfingerprint_key = { env = \"K\" }\n";

#[test]
fn the_design_example_parses() {
    let c = config();
    assert_eq!(c.gateway.listen, "127.0.0.1:8750");
    assert_eq!(
        c.gateway.fingerprint_key,
        SecretRef::Env("POSTERN_FINGERPRINT_KEY".into())
    );
    assert_eq!(
        c.actor("billing-agent").unwrap().session_approval,
        SessionApproval::Auto
    );
    assert_eq!(
        c.actor("ops-agent").unwrap().session_approval,
        SessionApproval::Required
    );
    let t = c.tool("create_invoice").unwrap();
    assert_eq!(t.class, ActionClass::IdempotentWrite);
    assert_eq!(t.match_window, Duration::from_secs(600));
    assert_eq!(t.retention, Duration::from_secs(7 * 86_400));
    assert_eq!(t.recovery.method, RecoveryMethod::RetrySameKey);
    assert!(t.recovery.status_query.is_some());
    assert_eq!(
        c.tool("wire_money").unwrap().recovery.method,
        RecoveryMethod::Review
    );
    assert_eq!(
        c.tool("restart_service").unwrap().recovery.method,
        RecoveryMethod::Marker
    );
    assert_eq!(
        c.tool("list_invoices").unwrap().match_window,
        Duration::ZERO
    );
}

#[test]
fn unknown_keys_name_file_line_and_key() {
    let text = CONFIG.replace(
        "match_window = \"10m\"",
        "match_window = \"10m\"\nmatch_windw = \"5m\"",
    );
    let err = parse_err(&text);
    let line = text
        .lines()
        .position(|l| l.starts_with("match_windw"))
        .unwrap()
        + 1;
    assert_eq!((err.file.as_str(), err.line), ("bad.toml", line));
    assert!(err.message.contains("unknown field `match_windw`"), "{err}");
    assert!(err.to_string().starts_with(&format!("bad.toml:{line}:")));

    let err = parse_err(&format!("{GATEWAY}listn = \"x\"\n"));
    assert_eq!(err.line, 3);
    assert!(err.message.contains("`listn`"), "{err}");

    let err = parse_err(&format!("{GATEWAY}[[tool]]\nname = \"t\"\nclass = \"read_only\"\nhttp = {{ method = \"GET\", url = \"http://127.0.0.1:1/\", verb = \"x\" }}\n"));
    assert_eq!(err.line, 6);
    assert!(err.message.contains("`verb`"), "{err}");
}

#[test]
fn inline_secrets_are_refused_without_being_echoed() {
    let err = parse_err("[gateway]\nfingerprint_key = \"deadbeefsecret\"\n");
    assert_eq!(err.line, 2);
    assert!(err.message.contains("never written inline"), "{err}");
    assert!(!err.to_string().contains("deadbeefsecret"));
}

fn tool_err(body: &str) -> String {
    parse_err(&format!("{GATEWAY}[credential.k]\nkind = \"ssh_key\"\nsecret = {{ env = \"S\" }}\n[[tool]]\nname = \"t\"\n{body}\n")).to_string()
}

#[test]
fn invalid_contracts_name_the_tool_and_the_field() {
    let http = "http = { method = \"POST\", url = \"http://127.0.0.1:9/x\" }";
    let cases = [
        (format!("class = \"idempotent_write\"\n{http}"), "tool \"t\": match_window: missing"),
        (format!("class = \"conditional_write\"\nmatch_window = \"1m\"\n{http}"), "tool \"t\": recovery.precondition: missing"),
        (format!("class = \"irreversible\"\nmatch_window = \"1m\"\nrecovery = {{ method = \"retry_same_key\" }}\n{http}"), "tool \"t\": recovery.method: retry_same_key is not safe for a irreversible tool"),
        (format!("class = \"remote_command\"\nmatch_window = \"1m\"\n{http}"), "tool \"t\": recovery.method: the marker protocol exists only on the ssh channel"),
        (format!("class = \"read_only\"\nmatch_window = \"1m\"\n{http}"), "tool \"t\": match_window: a read_only tool is never matched"),
        (format!("class = \"idempotent_write\"\nmatch_window = \"2d\"\nretention = \"1d\"\n{http}"), "tool \"t\": retention: must be at least the match window"),
        (format!("class = \"idempotent_write\"\nmatch_window = \"1m\"\nrecovery = {{ method = \"status_query\" }}\n{http}"), "tool \"t\": recovery.status_query: missing"),
        (format!("class = \"sometimes\"\n{http}"), "tool \"t\": class: \"sometimes\" is not one of"),
        ("class = \"read_only\"".to_string(), "tool \"t\": channel: missing"),
        (format!("match_window = \"1m\"\n{http}"), "tool \"t\": class: missing"),
        (format!("class = \"idempotent_write\"\nmatch_window = \"ten minutes\"\n{http}"), "tool \"t\": match_window: invalid duration"),
        (format!("class = \"idempotent_write\"\nmatch_window = \"1m\"\nsecret_fields = [\"pin\"]\ninput_schema = {{ type = \"object\", properties = {{ amount = {{ type = \"integer\" }} }} }}\n{http}"), "tool \"t\": secret_fields: \"pin\" is not a property of input_schema"),
        (format!("class = \"idempotent_write\"\nmatch_window = \"1m\"\ninput_schema = {{ type = \"array\" }}\n{http}"), "tool \"t\": input_schema: must have \"type\": \"object\""),
        ("class = \"idempotent_write\"\nmatch_window = \"1m\"\nhttp = { method = \"POST\", url = \"http://127.0.0.1:9/x\", credential = \"nope\" }".to_string(), "tool \"t\": credential: \"nope\" is not declared"),
        ("class = \"idempotent_write\"\nmatch_window = \"1m\"\nhttp = { method = \"FETCH\", url = \"http://127.0.0.1:9/x\" }".to_string(), "tool \"t\": http: method \"FETCH\""),
        ("class = \"idempotent_write\"\nmatch_window = \"1m\"\nhttp = { method = \"POST\", url = \"ftp://127.0.0.1/x\" }".to_string(), "tool \"t\": http: url \"ftp://127.0.0.1/x\" must start with http"),
        ("class = \"idempotent_write\"\nmatch_window = \"1m\"\nmcp = { server = \"ghost\", tool = \"x\" }".to_string(), "tool \"t\": mcp.server: \"ghost\" is not declared"),
        (format!("class = \"idempotent_write\"\nmatch_window = \"1m\"\n{http}\nmcp = {{ server = \"a\", tool = \"b\" }}"), "tool \"t\": channel: declare exactly one"),
    ];
    for (body, expected) in cases {
        let err = tool_err(&body);
        assert!(
            err.contains(expected),
            "for\n{body}\nexpected {expected:?}\ngot {err}"
        );
        assert!(
            err.starts_with("bad.toml:7:"),
            "the tool's name line: {err}"
        );
    }
}

#[test]
fn upstream_mcp_tools_default_to_irreversible() {
    let text = format!("{GATEWAY}[upstream.files]\ncommand = [\"files-mcp\"]\n[[tool]]\nname = \"delete_file\"\nmatch_window = \"1m\"\nmcp = {{ server = \"files\", tool = \"delete\" }}\n");
    let c = Config::parse(&text, "x.toml").unwrap();
    assert_eq!(
        c.tool("delete_file").unwrap().class,
        ActionClass::Irreversible
    );
    assert_eq!(
        c.tool("delete_file").unwrap().recovery.method,
        RecoveryMethod::Review
    );
}

#[test]
fn an_upstream_exposed_whole_gets_one_default_contract() {
    let text = format!("{GATEWAY}[upstream.files]\ncommand = [\"files-mcp\"]\nexpose = \"all\"\n[[actor]]\nname = \"a\"\ntools = [\"files_*\"]\n");
    let c = Config::parse(&text, "x.toml").unwrap();
    let all = c.upstreams["files"].expose_all.as_ref().unwrap();
    assert_eq!(all.prefix, "files_");
    let delete = all.contract("files_delete", "delete");
    assert_eq!(delete.class, ActionClass::Irreversible);
    assert_eq!(delete.recovery.method, RecoveryMethod::Review);
    assert_eq!(delete.match_window, Duration::from_secs(600));
    assert_eq!(delete.channel.target(), "files/delete");
    assert!(c.actor("a").unwrap().may_call("files_delete"));
    assert!(!c.actor("a").unwrap().may_call("other"));
    assert_eq!(all.served_name("bad name"), None);

    let read = format!("{GATEWAY}[upstream.docs]\nurl = \"http://127.0.0.1:1/mcp\"\nexpose = \"all\"\nprefix = \"\"\ndefault_class = \"read_only\"\n");
    let c = Config::parse(&read, "x.toml").unwrap();
    let all = c.upstreams["docs"].expose_all.as_ref().unwrap();
    assert_eq!(
        all.contract("search", "search").match_window,
        Duration::ZERO
    );

    for (body, wanted) in [
        ("expose = \"some\"\n", "upstream.u.expose: \"some\" is not \"all\""),
        ("prefix = \"u_\"\n", "upstream.u.prefix: applies only with expose = \"all\""),
        ("expose = \"all\"\ndefault_class = \"conditional_write\"\n", "upstream.u.default_class: conditional_write cannot be served without a contract of its own"),
        ("expose = \"all\"\ndefault_class = \"sometimes\"\n", "upstream.u.default_class: \"sometimes\" is not one of"),
        ("expose = \"all\"\nprefix = \"a b\"\n", "upstream.u.prefix: \"a b\" may hold only"),
        ("expose = \"all\"\napproval = \"maybe\"\n", "upstream.u.approval: \"maybe\" is not"),
        ("on_tool_error = \"rejected\"\n", "upstream.u.on_tool_error: applies only with expose = \"all\""),
        ("expose = \"all\"\non_tool_error = \"never\"\n", "upstream.u.on_tool_error: \"never\" is not \"unknown\" or \"rejected\""),
        ("startup_timeout = \"soon\"\n", "upstream.u.startup_timeout:"),
    ] {
        let text = format!("{GATEWAY}[upstream.u]\ncommand = [\"u\"]\n{body}");
        let err = parse_err(&text).to_string();
        assert!(err.contains(wanted), "{body}: {err}");
    }
    let overlap = format!("{GATEWAY}[upstream.a]\ncommand = [\"a\"]\nexpose = \"all\"\nprefix = \"x_\"\n[upstream.b]\ncommand = [\"b\"]\nexpose = \"all\"\nprefix = \"x_y_\"\n");
    assert!(
        parse_err(&overlap).to_string().contains("overlap"),
        "{}",
        parse_err(&overlap)
    );
    let unknown = format!("{GATEWAY}[upstream.a]\ncommand = [\"a\"]\nexpose = \"all\"\n[[actor]]\nname = \"x\"\ntools = [\"b_*\"]\n");
    assert!(parse_err(&unknown)
        .to_string()
        .contains("\"b_*\" is not declared"));
}

/// A stdio upstream's `env`: plain values and secret references (never the vault, which is
/// locked when the process starts); names and values the process environment cannot hold are
/// refused, naming the variable.
#[test]
fn an_upstream_env_takes_plain_values_and_secret_references() {
    let text = format!("{GATEWAY}[upstream.u]\ncommand = [\"u\"]\nenv = {{ MODE = \"prod\", KEY = {{ env = \"U_KEY\" }}, CERT = {{ file = \"u.pem\" }} }}\n");
    let c = Config::parse(&text, "t.toml").unwrap();
    let UpstreamTransport::Stdio { env, .. } = &c.upstreams["u"].transport else {
        panic!("stdio expected")
    };
    assert_eq!(env["MODE"], EnvValue::Plain("prod".into()));
    assert_eq!(env["KEY"], EnvValue::Secret(SecretRef::Env("U_KEY".into())));
    assert_eq!(
        env["CERT"],
        EnvValue::Secret(SecretRef::File("u.pem".into()))
    );
    for (env, wanted) in [
        (
            "{ K = { vault = \"k\" } }",
            "upstream.u.env.K: an upstream's environment is read when its process starts",
        ),
        (
            "{ \"A=B\" = \"x\" }",
            "upstream.u.env.A=B: a variable name is non-empty",
        ),
        (
            "{ \"\" = \"x\" }",
            "upstream.u.env.: a variable name is non-empty",
        ),
        (
            "{ K = \"a\\u0000b\" }",
            "upstream.u.env.K: the value holds a NUL",
        ),
        (
            "{ K = { env = \"A\", file = \"b\" } }",
            "exactly one source",
        ),
        ("{ K = 3 }", "a string or a secret reference"),
    ] {
        let text = format!("{GATEWAY}[upstream.u]\ncommand = [\"u\"]\nenv = {env}\n");
        let err = parse_err(&text).to_string();
        assert!(err.contains(wanted), "{env}: {err}");
    }
}

/// `on_tool_error` and `startup_timeout` on an upstream served whole: its tools' contracts take
/// the verdict.
#[test]
fn an_upstream_exposed_whole_takes_on_tool_error_and_startup_timeout() {
    use postern_core::contract::{ChannelSpec, ToolErrorVerdict};
    let text = format!("{GATEWAY}[upstream.fs]\ncommand = [\"fs\"]\nexpose = \"all\"\non_tool_error = \"rejected\"\nstartup_timeout = \"3s\"\n");
    let c = Config::parse(&text, "t.toml").unwrap();
    let fs = &c.upstreams["fs"];
    assert_eq!(fs.startup_timeout, Duration::from_secs(3));
    let contract = fs.expose_all.as_ref().unwrap().contract("fs_read", "read");
    let ChannelSpec::Mcp(m) = &contract.channel else {
        panic!("an MCP channel")
    };
    assert_eq!(m.on_tool_error, ToolErrorVerdict::Rejected);
}

#[test]
fn duplicate_names_are_refused() {
    let t = "[[tool]]\nname = \"t\"\nclass = \"read_only\"\nhttp = { method = \"GET\", url = \"http://127.0.0.1:9/\" }\n";
    let err = parse_err(&format!("{GATEWAY}{t}{t}"));
    assert!(
        err.message.contains("declared twice") && err.line == 8,
        "{err}"
    );
    let err = parse_err(&format!(
        "{GATEWAY}[[actor]]\nname = \"a\"\n[[actor]]\nname = \"a\"\n"
    ));
    assert!(
        err.message.contains("declared twice") && err.line == 6,
        "{err}"
    );
    // Runs an agent names are kept as ACTOR/RUN: a '/' in an actor's name would blur that.
    let err = parse_err(&format!("{GATEWAY}[[actor]]\nname = \"a/b\"\n"));
    assert!(err.message.contains("may not contain '/'"), "{err}");
    let err = parse_err(&format!(
        "{GATEWAY}[[actor]]\nname = \"a\"\ntools = [\"ghost\"]\n"
    ));
    assert!(
        err.message.contains("tool \"ghost\" is not declared"),
        "{err}"
    );
}

/// Issue 12: the listener's and the front's bounds have defaults, and a value that would refuse
/// everything (0) or does not parse is refused, naming the key.
#[test]
fn bounds_have_defaults_and_nonsense_values_are_refused() {
    let c = Config::parse(GATEWAY, "ok.toml").unwrap();
    assert_eq!(c.gateway.header_read_timeout, Duration::from_secs(10));
    assert_eq!(c.gateway.idle_timeout, Duration::from_secs(120));
    assert_eq!(c.gateway.max_connections, 1024);
    assert_eq!(c.gateway.max_connections_per_address, 256, "a quarter");
    assert_eq!(c.gateway.first_byte_timeout, Duration::from_secs(5));
    assert_eq!(c.gateway.max_sessions_per_actor, 64);
    assert_eq!(c.gateway.max_streams_per_actor, 256);
    assert_eq!(c.gateway.max_pending_approvals_per_actor, 100);
    let set = Config::parse(
        &format!("{GATEWAY}header_read_timeout = \"1s\"\nidle_timeout = \"500ms\"\nmax_connections = 2\nmax_sessions_per_actor = 3\nmax_streams_per_actor = 4\nmax_pending_approvals_per_actor = 5\n"),
        "ok.toml",
    )
    .unwrap();
    assert_eq!(set.gateway.header_read_timeout, Duration::from_secs(1));
    assert_eq!(set.gateway.idle_timeout, Duration::from_millis(500));
    assert_eq!(set.gateway.max_connections, 2);
    assert_eq!(set.gateway.max_connections_per_address, 1, "at least 1");
    assert_eq!(set.gateway.max_sessions_per_actor, 3);
    assert_eq!(set.gateway.max_streams_per_actor, 4);
    assert_eq!(set.gateway.max_pending_approvals_per_actor, 5);
    for (line, key, says) in [
        (
            "header_read_timeout = \"0s\"",
            "header_read_timeout",
            "longer than 0",
        ),
        (
            "header_read_timeout = \"soon\"",
            "header_read_timeout",
            "soon",
        ),
        ("idle_timeout = \"0ms\"", "idle_timeout", "longer than 0"),
        ("idle_timeout = \"2 minutes\"", "idle_timeout", "2 minutes"),
        ("max_connections = 0", "max_connections", "at least 1"),
        (
            "max_pending_approvals_per_actor = 0",
            "max_pending_approvals_per_actor",
            "at least 1",
        ),
        (
            "max_connections_per_address = 0",
            "max_connections_per_address",
            "at least 1",
        ),
        (
            "max_connections = 8\nmax_connections_per_address = 9",
            "max_connections_per_address",
            "more than max_connections (8)",
        ),
        (
            "first_byte_timeout = \"0s\"",
            "first_byte_timeout",
            "longer than 0",
        ),
        (
            "max_sessions_per_actor = 0",
            "max_sessions_per_actor",
            "at least 1",
        ),
        (
            "max_streams_per_actor = 0",
            "max_streams_per_actor",
            "at least 1",
        ),
    ] {
        let err = parse_err(&format!("{GATEWAY}{line}\n"));
        assert!(
            err.message.contains(&format!("gateway.{key}")) && err.message.contains(says),
            "{line}: {err}"
        );
    }
    let err = parse_err(&format!("{GATEWAY}max_connections = -1\n"));
    assert!(err.message.contains("invalid value"), "{err}");
}

/// Issue 13: `http.ca_file` and credentials' client certificates.
#[test]
fn tls_fields_parse_and_mtls_credentials_are_complete() {
    let text = format!(
        "{GATEWAY}
[credential.bank]
kind = \"bearer\"
secret = {{ env = \"BANK_TOKEN\" }}
client_certificate = \"certs/client.pem\"
client_key = {{ file = \"certs/client.key\" }}

[credential.cert_only]
kind = \"mtls\"
client_certificate = \"certs/client.pem\"
client_key = {{ env = \"CLIENT_KEY_PEM\" }}

[[tool]]
name = \"pay\"
class = \"idempotent_write\"
match_window = \"1m\"
http = {{ method = \"POST\", url = \"https://bank.example/pay\", credential = \"bank\", ca_file = \"certs/bank-ca.pem\" }}
"
    );
    let c = Config::parse(&text, "tls.toml").unwrap();
    let bank = &c.credentials["bank"];
    let cert = bank.client_certificate.as_ref().unwrap();
    assert_eq!(cert.certificate, "certs/client.pem");
    assert_eq!(cert.key, SecretRef::File("certs/client.key".into()));
    assert_eq!(bank.secret, Some(SecretRef::Env("BANK_TOKEN".into())));
    let only = &c.credentials["cert_only"];
    assert_eq!(only.kind, postern_core::config::CredentialKind::Mtls);
    assert_eq!(only.secret, None);
    let postern_core::contract::ChannelSpec::Http(h) = &c.tool("pay").unwrap().channel else {
        panic!("an http tool");
    };
    assert_eq!(h.ca_file.as_deref(), Some("certs/bank-ca.pem"));
}

#[test]
fn incomplete_or_misplaced_tls_fields_are_refused() {
    let credential =
        |body: &str| parse_err(&format!("{GATEWAY}[credential.c]\n{body}\n")).to_string();
    let cases = [
        ("kind = \"mtls\"\nclient_certificate = \"c.pem\"", "client_certificate and client_key go together"),
        ("kind = \"mtls\"\nsecret = { env = \"S\" }\nclient_certificate = \"c.pem\"\nclient_key = { env = \"K\" }", "kind \"mtls\" with these fields is not valid"),
        ("kind = \"mtls\"", "kind \"mtls\" with these fields is not valid"),
        ("kind = \"ssh_key\"\nsecret = { env = \"S\" }\nclient_certificate = \"c.pem\"\nclient_key = { env = \"K\" }", "kind \"ssh_key\" with these fields is not valid"),
        ("kind = \"bearer\"", "kind \"bearer\" needs a secret"),
    ];
    for (body, expected) in cases {
        let err = credential(body);
        assert!(
            err.contains(expected),
            "for\n{body}\nexpected {expected:?}\ngot {err}"
        );
    }

    let with_cert = "[credential.m]\nkind = \"mtls\"\nclient_certificate = \"c.pem\"\nclient_key = { env = \"K\" }\n";
    let tool = |http: &str| {
        parse_err(&format!("{GATEWAY}{with_cert}[[tool]]\nname = \"t\"\nclass = \"idempotent_write\"\nmatch_window = \"1m\"\nhttp = {{ method = \"POST\", {http} }}\n")).to_string()
    };
    let err = tool("url = \"http://127.0.0.1:9/x\", ca_file = \"ca.pem\"");
    assert!(
        err.contains("tool \"t\": http.ca_file: the url is not https://"),
        "{err}"
    );
    let err = tool("url = \"http://127.0.0.1:9/x\", credential = \"m\"");
    assert!(err.contains("tool \"t\": http.credential: \"m\" has a client certificate, but the url is not https://"), "{err}");
    let err = tool("url = \"https://127.0.0.1:9/x\", ca_file = \"\"");
    assert!(err.contains("http.ca_file: is empty"), "{err}");
}

/// A stdio upstream's `sandbox`: left out it is sandboxed with nothing more; a table names
/// what else it reads and writes and its user; `"off"` opts out. Anything else is refused,
/// naming the key; an HTTP upstream has none.
#[test]
fn an_upstream_sandbox_is_on_by_default_a_table_or_off() {
    use postern_core::config::Sandbox;
    let sandbox = |body: &str| {
        let text = format!("{GATEWAY}[upstream.u]\ncommand = [\"u\"]\n{body}");
        let c = Config::parse(&text, "t.toml").unwrap();
        let UpstreamTransport::Stdio { sandbox, .. } = &c.upstreams["u"].transport else {
            panic!("stdio expected")
        };
        sandbox.clone()
    };
    assert_eq!(sandbox(""), Sandbox::default());
    assert_eq!(sandbox("sandbox = \"off\"\n"), Sandbox::Off);
    assert_eq!(
        sandbox("[upstream.u.sandbox]\nread = [\"/srv/r\"]\nwrite = [\"data\"]\nuser = \"mcp\"\n"),
        Sandbox::On {
            read: vec!["/srv/r".into()],
            write: vec!["data".into()],
            user: Some("mcp".into()),
        }
    );
    for (body, wanted) in [
        (
            "sandbox = \"on\"\n",
            "upstream.u.sandbox: \"on\" is not \"off\"",
        ),
        ("sandbox = true\n", "upstream.u.sandbox: is a boolean where"),
        (
            "sandbox = { reed = [\"/x\"] }\n",
            "upstream.u.sandbox: unknown field `reed`",
        ),
        (
            "sandbox = { write = [\"\"] }\n",
            "upstream.u.sandbox.write: \"\" is not a path",
        ),
        (
            "sandbox = { user = \"\" }\n",
            "upstream.u.sandbox.user: names a user",
        ),
    ] {
        let text = format!("{GATEWAY}[upstream.u]\ncommand = [\"u\"]\n{body}");
        let err = parse_err(&text).to_string();
        assert!(err.contains(wanted), "{body}: {err}");
    }
    let http =
        format!("{GATEWAY}[upstream.u]\nurl = \"http://127.0.0.1:1/mcp\"\nsandbox = \"off\"\n");
    assert!(parse_err(&http)
        .to_string()
        .contains("upstream.u.sandbox: only a stdio upstream"));
}

//! Issue 50: people and programs get their tokens from the organisation's provider (a real
//! `oidc-provider`, [`crate::oidc`]), against the real `postern serve`:
//! - an operator signs in to the console in Chromium (OpenID Connect: code, PKCE, `state`,
//!   `nonce`) and signs out; a forged callback and a person who is an agent are refused;
//! - an operator signs in to the CLI with the device authorization grant (the verification
//!   page confirmed in Chromium) and the operator commands use that sign-in;
//! - `postern connect` gets its own token: client credentials for a headless agent, and a
//!   person's sign-in on a loopback redirect, kept (0600) for the next start, never printed.

use std::process::Stdio;
use std::time::Duration;

use fantoccini::Locator;
use postern_testkit::browser::Browser;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::connect::{call_line, Lines};
use crate::harness::{config, Dir, Served};
use crate::oidc::{free_port, OidcProvider};

const CONSOLE_SECRET: &str = "console-client-secret-0123456789abcdef";
const CLAUDE_SECRET: &str = "claude-client-secret-0123456789abcdef";

/// The gateway: issuer at `issuer`, operator dana is group `approvers` (and signs in to the
/// console as client `console`), actor `person` is group `agents`, actor `connector` is client
/// `claude`.
fn signed_in_config(target: &str, issuer: &str) -> String {
    format!(
        r#"{}
[console.sign_in]
issuer = "{issuer}"
client_id = "console"
client_secret = {{ file = "console.secret" }}
scopes = ["groups"]

[[issuer]]
url = "{issuer}"

[[operator]]
name = "dana"
claims = {{ issuer = "{issuer}", group = "approvers" }}

[[actor]]
name = "person"
claims = {{ issuer = "{issuer}", group = "agents" }}

[[actor]]
name = "connector"
claims = {{ issuer = "{issuer}", client_id = "claude" }}
"#,
        config(target)
    )
}

struct Bench {
    _target: postern_demo::target::InvoiceApiHandle,
    dir: Dir,
    served: Served,
    _provider: OidcProvider,
    base: String,
}

/// The gateway, then the provider with the person signed in there as `groups`, and the clients
/// the console, the CLI and `postern connect` are.
async fn start(tag: &str, groups: &[&str]) -> Bench {
    start_with(tag, groups, 300).await
}

/// As [`start`], the provider's access tokens living `ttl` seconds.
async fn start_with(tag: &str, groups: &[&str], ttl: u64) -> Bench {
    let target = postern_demo::target::InvoiceApi::start().await.unwrap();
    let dir = Dir::new(tag);
    crate::harness::write_private(&dir.0.join("console.secret"), CONSOLE_SECRET);
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let served = Served::start(
        &dir.0,
        &signed_in_config(&format!("http://{}", target.addr), &issuer),
    );
    let base = served.url.trim_end_matches("/mcp").to_string();
    let provider = OidcProvider::start_on(
        port,
        &served.url,
        "claude",
        CLAUDE_SECRET,
        json!({
            "resources": [served.url, format!("{base}/ops")],
            "account": {"sub": "person-1", "groups": groups},
            "ttl": ttl,
            "clients": [
                {"client_id": "console", "client_secret": CONSOLE_SECRET,
                 "redirect_uris": [format!("{base}/ui/login/callback")],
                 "grant_types": ["authorization_code"], "response_types": ["code"]},
                {"client_id": "postern-cli", "token_endpoint_auth_method": "none",
                 "grant_types": ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
                 "response_types": [], "redirect_uris": []},
                {"client_id": "desktop", "application_type": "native",
                 "token_endpoint_auth_method": "none",
                 "redirect_uris": ["http://127.0.0.1/callback"],
                 "grant_types": ["authorization_code", "refresh_token"]},
            ],
        }),
    );
    Bench {
        _target: target,
        dir,
        served,
        _provider: provider,
        base,
    }
}

async fn page_text(browser: &Browser) -> String {
    browser.client.source().await.unwrap()
}

/// Waits until the browser's page contains `text`.
async fn wait_for_text(browser: &Browser, text: &str) -> String {
    let started = std::time::Instant::now();
    loop {
        let source = page_text(browser).await;
        if source.contains(text) {
            return source;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the page never showed {text:?}: {source}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_to_the_console_with_the_provider_and_signs_out() {
    let b = start("sign-in-console", &["approvers"]).await;
    let browser = Browser::start().await;
    let c = &browser.client;
    // A callback this browser did not start is refused before anything is exchanged.
    c.goto(&format!(
        "{}/ui/login/callback?code=stolen&state=guess",
        b.base
    ))
    .await
    .unwrap();
    wait_for_text(&browser, "was not started from this browser").await;
    // The log-in page offers the provider; the provider knows the person; the console opens.
    c.goto(&format!("{}/ui/runs", b.base)).await.unwrap();
    c.find(Locator::Id("sso"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let page = wait_for_text(&browser, "operator <strong>dana</strong>").await;
    assert!(page.contains("Runs"), "{page}");
    assert!(c
        .current_url()
        .await
        .unwrap()
        .as_str()
        .ends_with("/ui/runs"));
    // Signing out ends the session: the console asks to log in again.
    c.find(Locator::Css("form.logout button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_text(&browser, "Logged out.").await;
    c.goto(&format!("{}/ui/approvals", b.base)).await.unwrap();
    wait_for_text(&browser, "Operator token").await;
    browser.close().await;
    b.served.stop();
}

/// A person the provider signs in, but whose claims are an agent's, is not let in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_whose_claims_are_an_agents_cannot_sign_in_to_the_console() {
    let b = start("sign-in-agent", &["agents"]).await;
    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("{}/ui/login/sso?next=/ui/runs", b.base))
        .await
        .unwrap();
    let page = wait_for_text(&browser, "Sign-in failed").await;
    assert!(page.contains("is actor \"person\""), "{page}");
    c.goto(&format!("{}/ui/runs", b.base)).await.unwrap();
    wait_for_text(&browser, "Operator token").await;
    browser.close().await;
    b.served.stop();
}

/// `postern login`: the device grant; the person confirms in a browser; the operator commands
/// then work with no token in the environment, and `postern logout` ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_to_the_cli_with_the_device_grant() {
    let b = start("sign-in-device", &["approvers"]).await;
    let state = b.dir.0.join("state");
    let cli = |args: &[&str]| {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_postern"));
        c.args(args)
            .args(["--gateway", &b.base])
            .env("XDG_STATE_HOME", &state)
            .env_remove("POSTERN_OPERATOR_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    };
    let (code, _, err) = output(cli(&["approvals", "list"])).await;
    assert_ne!(code, 0);
    assert!(err.contains("postern login"), "{err}");
    let mut login = cli(&["login", "--client-id", "postern-cli", "--scope", "ops"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(login.stderr.take().unwrap()).lines();
    let mut said = String::new();
    let complete = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("postern login shows where to confirm")
            .unwrap()
            .expect("postern login ended early");
        said.push_str(&line);
        said.push('\n');
        if let Some(url) = line
            .strip_prefix("(or open ")
            .and_then(|l| l.strip_suffix(')'))
        {
            break url.to_string();
        }
    };
    assert!(said.contains("enter the code"), "{said}");
    let browser = Browser::start().await;
    browser.client.goto(&complete).await.unwrap();
    browser
        .client
        .find(Locator::Id("confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_text(&browser, "signed in").await;
    let status = tokio::time::timeout(Duration::from_secs(30), login.wait())
        .await
        .expect("postern login ends once confirmed")
        .unwrap();
    while let Ok(Some(line)) = lines.next_line().await {
        said.push_str(&line);
    }
    assert!(status.success(), "{said}");
    let kept = kept_token(&state);
    assert!(!said.contains(&kept), "postern login printed its token");
    let (code, out, err) = output(cli(&["approvals", "list", "--json"])).await;
    assert_eq!(code, 0, "{err}");
    assert!(serde_json::from_str::<Value>(&out).is_ok(), "{out}");
    let (code, _, _) = output(cli(&["logout"])).await;
    assert_eq!(code, 0);
    let (code, _, err) = output(cli(&["approvals", "list"])).await;
    assert_ne!(code, 0, "signed out, the CLI has no token: {err}");
    browser.close().await;
    b.served.stop();
}

async fn output(mut c: tokio::process::Command) -> (i32, String, String) {
    let out = c.output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The one token file kept under `state`: owner-only, and its access token.
fn kept_token(state: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let dir = state.join("postern/tokens");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the token file is readable by others");
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    kept["tokens"]["access_token"].as_str().unwrap().to_string()
}

fn connect(url: &str, state: &std::path::Path, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_postern"));
    c.arg("connect")
        .arg(url)
        .args(args)
        .env("XDG_STATE_HOME", state)
        .env("CLAUDE_SECRET", CLAUDE_SECRET)
        .env_remove("POSTERN_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    c
}

async fn one_call(lines: &mut Lines, customer: &str) -> Value {
    let answer = lines
        .ask(&call_line(
            1,
            json!({"customer": customer, "amount": 2}),
            "",
        ))
        .await;
    let state = &answer["result"]["structuredContent"]["execution"]["state"];
    assert_eq!(state, "completed", "{answer}");
    answer
}

/// `postern connect --client-id`: client credentials for a headless agent; a person's sign-in
/// in the browser on a loopback redirect, kept for the next start, where it is refreshed (the
/// provider's tokens live 20 s, under the 30 s a kept token must have left) with no second
/// sign-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postern_connect_gets_its_token_from_the_provider() {
    let b = start_with("sign-in-connect", &["agents"], 20).await;
    // Headless: client credentials.
    let machine = b.dir.0.join("machine");
    let args = [
        "--client-id",
        "claude",
        "--client-secret-env",
        "CLAUDE_SECRET",
    ];
    let mut agent =
        Lines::initialize(connect(&b.served.url, &machine, &args).spawn().unwrap()).await;
    one_call(&mut agent, "headless").await;
    let _ = agent.child.kill().await;
    crate::harness::assert_acted_for(&b.dir.0, "create_invoice", "connector", "claude");
    let machine_token = kept_token(&machine);
    // A person: the sign-in URL on standard error, opened in the browser, comes back to the
    // bridge's loopback listener.
    let desk = b.dir.0.join("desk");
    let mut child = connect(
        &b.served.url,
        &desk,
        &["--client-id", "desktop", "--scope", "mcp"],
    );
    let mut child = child.stderr(Stdio::piped()).spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), err.next_line())
            .await
            .expect("the bridge asks for a sign-in")
            .unwrap()
            .expect("the bridge ended early");
        if let Some((_, url)) = line.split_once("open ") {
            break url.to_string();
        }
    };
    let browser = Browser::start().await;
    browser.client.goto(&url).await.unwrap();
    wait_for_text(&browser, "Signed in").await;
    let mut person = Lines::initialize(child).await;
    one_call(&mut person, "desk").await;
    let _ = person.child.kill().await;
    let desk_token = kept_token(&desk);
    // Started again, it uses the kept token: no sign-in asked (its stderr stays quiet).
    let mut again = connect(
        &b.served.url,
        &desk,
        &["--client-id", "desktop", "--scope", "mcp"],
    );
    let again = again.stderr(Stdio::piped()).spawn().unwrap();
    let mut person = Lines::initialize(again).await;
    one_call(&mut person, "desk-again").await;
    let _ = person.child.kill().await;
    let mut rest = String::new();
    let mut stderr = person.child.stderr.take().unwrap();
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut rest),
    )
    .await;
    assert!(!rest.contains("sign in"), "asked to sign in again: {rest}");
    crate::harness::assert_acted_for(&b.dir.0, "create_invoice", "person", "person-1");
    let refreshed = kept_token(&desk);
    assert_ne!(refreshed, desk_token, "the kept token was refreshed");
    // No token is anywhere in the record.
    let (export, _) = crate::harness::exported_acceptances(&b.dir.0, "create_invoice");
    for token in [machine_token, desk_token, refreshed] {
        assert!(!export.contains(&token));
    }
    browser.close().await;
    b.served.stop();
}

/// A look-alike gateway whose metadata names the real gateway's resource (and the real
/// provider) would be handed a token for the real `/ops`: `postern login` and `postern
/// connect` refuse metadata that is not about the address they asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_naming_another_resource_is_refused() {
    let b = start("sign-in-lookalike", &["approvers"]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fake = format!("http://{}", listener.local_addr().unwrap());
    let real = b.base.clone();
    let issuer = b._provider.issuer.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let which = if head.contains("/ops ") { "ops" } else { "mcp" };
            let body =
                json!({"resource": format!("{real}/{which}"), "authorization_servers": [issuer]})
                    .to_string();
            let answer = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            let _ = conn.write_all(answer.as_bytes()).await;
        }
    });
    let state = b.dir.0.join("state");
    let login = tokio::process::Command::new(env!("CARGO_BIN_EXE_postern"))
        .args([
            "login",
            "--client-id",
            "postern-cli",
            "--scope",
            "ops",
            "--gateway",
            &fake,
        ])
        .env("XDG_STATE_HOME", &state)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), login)
        .await
        .expect("postern login refuses at once")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("names the resource"), "{err}");
    assert!(
        !err.contains("enter the code"),
        "no sign-in was started: {err}"
    );
    let mut bridge = connect(
        &format!("{fake}/mcp"),
        &state,
        &[
            "--client-id",
            "claude",
            "--client-secret-env",
            "CLAUDE_SECRET",
        ],
    );
    let mut bridge = bridge.stderr(Stdio::piped()).spawn().unwrap();
    let mut err = BufReader::new(bridge.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), err.next_line())
        .await
        .expect("the bridge says why it has no token")
        .unwrap()
        .unwrap_or_default();
    assert!(line.contains("names the resource"), "{line}");
    assert!(
        !state.join("postern/tokens").exists()
            || std::fs::read_dir(state.join("postern/tokens"))
                .unwrap()
                .all(|e| !e.unwrap().path().to_string_lossy().ends_with(".json"))
    );
    let _ = bridge.kill().await;
    b.served.stop();
}

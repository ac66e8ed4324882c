//! The vault (issue 14), end to end: `postern vault init` and `set` write an encrypted file; a
//! `postern serve` whose credential's secret is in it starts locked and refuses those calls
//! before anything is sent; `postern vault unlock` (an operator, over the operator API) lets the
//! same call through, `lock` stops the next one; a wrong passphrase unlocks nothing, a damaged
//! file is a start-up error, and no byte of the secret is in the vault file or the ledger.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use postern_demo::target::InvoiceApi;
use serde_json::json;

use crate::harness::{
    config, execution, posts, write_private, Dir, Mcp, Served, ALICE_TOKEN, BILLING_TOKEN,
};

const SECRET: &str = "sk_vault_SECRET_5f3a9c";
const PASSPHRASE: &str = "a long vault passphrase";

fn vault_config(target: &str) -> String {
    format!(
        r#"{}
[[operator]]
name = "alice"
token = {{ file = "alice.token" }}

[credential.invoices-vault]
kind = "bearer"
secret = {{ vault = "invoices-token" }}

[[tool]]
name = "pay_vaulted"
description = "Pay with a token from the vault, every call approved"
class = "idempotent_write"
match_window = "10m"
approval = "every_call"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", credential = "invoices-vault", response_timeout = "1s" }}

[[tool]]
name = "create_invoice_vaulted"
description = "Create an invoice with a token from the vault"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}
http = {{ method = "POST", url = "{target}/invoices", credential = "invoices-vault", response_timeout = "1s" }}
"#,
        config(target).replacen("[gateway]\n", "[gateway]\nvault = \"postern.vault\"\n", 1)
    )
}

/// `postern ARGS` in `dir` with `stdin` on standard input; (exit code, stdout, stderr).
fn postern(dir: &Path, args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(args)
        .current_dir(dir)
        .env("POSTERN_OPERATOR_TOKEN", ALICE_TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// A target that wants the vault's token, and a directory with the config, the operator's
/// token, a passphrase file and a vault (made with `postern vault init` and `set`) holding it.
async fn vault_setup(tag: &str) -> (postern_demo::target::InvoiceApiHandle, Dir) {
    let target = InvoiceApi::start_with_token(SECRET).await.unwrap();
    let dir = Dir::new(tag);
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    crate::harness::prepare(&dir.0, &vault_config(&format!("http://{}", target.addr)));
    write_private(&dir.0.join("pass"), PASSPHRASE);
    let init = ["vault", "init", "--passphrase-fd", "0"];
    let (code, _, err) = postern(&dir.0, &init, PASSPHRASE);
    assert_eq!(code, 0, "{err}");
    let set = [
        "vault",
        "set",
        "invoices-token",
        "--passphrase-file",
        "pass",
    ];
    let (code, _, err) = postern(&dir.0, &set, SECRET);
    assert_eq!(code, 0, "{err}");
    (target, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_vault_refuses_before_sending_and_an_unlock_lets_the_call_through() {
    let (target, dir) = vault_setup("vault").await;
    let (code, out, _) = postern(&dir.0, &["vault", "list"], "");
    assert_eq!((code, out.trim()), (0, "invoices-token"));

    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let args = json!({"customer": "vault-co", "amount": 8});
    let refused = mcp
        .call("create_invoice_vaulted", args.clone(), json!({}))
        .await;
    let ex = execution(&refused);
    assert_eq!(ex["state"], "rejected", "{refused}");
    assert!(
        ex["next_step"]
            .as_str()
            .unwrap()
            .contains("vault is locked"),
        "{refused}"
    );
    assert!(
        target.state.requests().is_empty(),
        "nothing is sent while the vault is locked"
    );
    // A tool that needs nothing from the vault is not held up (this target wants the token,
    // so it answers 401, but the request went out).
    let plain = mcp
        .call(
            "create_invoice",
            json!({"customer": "plain-co", "amount": 1}),
            json!({}),
        )
        .await;
    assert_eq!(execution(&plain)["target_status"], 401, "{plain}");
    assert_eq!(posts(&target.state), 1);

    let gateway = ["--gateway", served.url.as_str()];
    let mut unlock = vec!["vault", "unlock", "--passphrase-fd", "0"];
    unlock.extend(gateway);
    let (code, _, err) = postern(&dir.0, &unlock, "not the passphrase");
    assert_eq!(code, 2);
    assert!(err.contains("wrong passphrase"), "{err}");
    let still = mcp
        .call("create_invoice_vaulted", args.clone(), json!({}))
        .await;
    assert_eq!(execution(&still)["state"], "rejected", "{still}");

    let (code, _, err) = postern(&dir.0, &unlock, PASSPHRASE);
    assert_eq!(code, 0, "{err}");
    let done = mcp
        .call("create_invoice_vaulted", args.clone(), json!({}))
        .await;
    assert_eq!(execution(&done)["state"], "completed", "{done}");
    assert_eq!(execution(&done)["target_status"], 201, "{done}");
    assert_eq!(target.state.count_for("vault-co"), 1);
    // The token the target saw is not in the answer the agent got.
    assert!(!done.to_string().contains(SECRET));

    let mut lock = vec!["vault", "lock"];
    lock.extend(gateway);
    let (code, _, err) = postern(&dir.0, &lock, "");
    assert_eq!(code, 0, "{err}");
    let after = mcp
        .call(
            "create_invoice_vaulted",
            json!({"customer": "late-co", "amount": 2}),
            json!({}),
        )
        .await;
    assert_eq!(execution(&after)["state"], "rejected", "{after}");
    assert_eq!(target.state.count_for("late-co"), 0);
    served.stop();

    // Not one byte of the secret in the vault file or the ledger.
    for file in ["postern.vault", "ledger.db", "ledger.db-wal"] {
        let path = dir.0.join(file);
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(!contains(&bytes, SECRET), "the secret is in {file}");
            assert!(!contains(&bytes, PASSPHRASE), "the passphrase is in {file}");
        }
    }

    // A damaged vault file is a clear start-up error.
    std::fs::write(dir.0.join("postern.vault"), "{\"format\": 1}").unwrap();
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(err.contains("is not a Postern vault"), "{err}");
}

#[test]
fn a_secret_the_vault_does_not_hold_or_a_vault_secret_outside_credentials_is_refused() {
    let dir = Dir::new("vault-missing");
    write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    crate::harness::prepare(&dir.0, &vault_config("http://127.0.0.1:9"));
    let (code, _, err) = postern(
        &dir.0,
        &["vault", "init", "--passphrase-fd", "0"],
        PASSPHRASE,
    );
    assert_eq!(code, 0, "{err}");
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(err.contains("holds no secret \"invoices-token\""), "{err}");

    let dir = Dir::new("vault-outside");
    let text = vault_config("http://127.0.0.1:9").replace(
        "name = \"ops\"\ntoken = { file = \"ops.token\" }",
        "name = \"ops\"\ntoken = { vault = \"ops-token\" }",
    );
    crate::harness::prepare(&dir.0, &text);
    let err = crate::harness::serve_refuses(&dir.0);
    assert!(err.contains("a token cannot come from the vault"), "{err}");
}

/// An approval given while the vault is locked is not spent on a request that cannot leave: the
/// call stays approved, and the agent's identical call sends it once the vault is unlocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_while_the_vault_is_locked_waits_for_the_unlock() {
    let (target, dir) = vault_setup("vault-approval").await;
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let gateway = ["--gateway", served.url.as_str()];
    let mut unlock = vec!["vault", "unlock", "--passphrase-fd", "0"];
    unlock.extend(gateway);
    let (code, _, err) = postern(&dir.0, &unlock, PASSPHRASE);
    assert_eq!(code, 0, "{err}");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let args = json!({"customer": "locked-approval", "amount": 3});
    let waiting = mcp.call("pay_vaulted", args.clone(), json!({})).await;
    assert_eq!(
        execution(&waiting)["state"],
        "awaiting_approval",
        "{waiting}"
    );
    let id = execution(&waiting)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut lock = vec!["vault", "lock"];
    lock.extend(gateway);
    assert_eq!(postern(&dir.0, &lock, "").0, 0);
    let mut approve = vec!["approvals", "approve", id.as_str()];
    approve.extend(gateway);
    let (code, _, err) = postern(&dir.0, &approve, "");
    assert_eq!(code, 0, "{err}");
    let held = mcp.call("pay_vaulted", args.clone(), json!({})).await;
    assert_eq!(execution(&held)["state"], "authorized", "{held}");
    assert!(execution(&held)["next_step"]
        .as_str()
        .unwrap()
        .contains("vault is locked"));
    assert!(
        target.state.requests().is_empty(),
        "nothing left while locked"
    );
    assert_eq!(postern(&dir.0, &unlock, PASSPHRASE).0, 0);
    let done = mcp.call("pay_vaulted", args, json!({})).await;
    assert_eq!(execution(&done)["state"], "completed", "{done}");
    assert_eq!(execution(&done)["execution_id"], id.as_str());
    assert_eq!(target.state.count_for("locked-approval"), 1);
}

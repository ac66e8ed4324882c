//! Issue 47: the gateway signs only what it wrote. Each test performs the attack of someone
//! who can write the store but holds no key: an `authorized` event's `approved_by` changed
//! from alice to mallory, every later hash recomputed, the chain's head row set to the new
//! hash and the checkpoints deleted — while the gateway runs (on SQLite and on PostgreSQL), or
//! while it is down (caught by the witness). Before the fix the running gateway read the new
//! head, signed it, and `audit verify --store --require-signed-tail` said VALID.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use postern_audit::{ChainedEvent, EventBody};
use serde_json::{json, Value};
use sqlx::Connection;

use crate::approvals::approval_config;
use crate::harness::{
    execution, operator, public_key_file, write_private, Dir, Mcp, Served, ALICE_TOKEN,
    BILLING_TOKEN,
};

/// The approval config, signing every second, on `store`, with `extra` TOML after it.
fn signing_config(target: &str, store: &str, extra: &str) -> String {
    approval_config(target)
        .replace("[gateway]\n", "[gateway]\ncheckpoint_every = \"1s\"\n")
        .replace(
            "store = \"sqlite://ledger.db\"",
            &format!("store = {store:?}"),
        )
        + extra
}

/// A gateway signing every second in front of a real invoice API, with alice's token in place.
struct Signing {
    _target: postern_demo::target::InvoiceApiHandle,
    dir: Dir,
    /// The store as the tests open it.
    url: String,
    served: Served,
}

impl Signing {
    /// On `store` (`sqlite://ledger.db` in the test's directory, or a PostgreSQL URL), with
    /// `extra` TOML after the config.
    async fn start(tag: &str, store: &str, extra: &str) -> Signing {
        let target = postern_demo::target::InvoiceApi::start().await.unwrap();
        let dir = Dir::new(tag);
        write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
        write_private(&dir.0.join("robot.token"), crate::approvals::ROBOT_TOKEN);
        let url = if store.starts_with("postgres") {
            store.to_string()
        } else {
            format!("sqlite://{}", dir.0.join("ledger.db").display())
        };
        let text = signing_config(&format!("http://{}", target.addr), store, extra);
        let served = Served::start(&dir.0, &text);
        Signing {
            _target: target,
            dir,
            url,
            served,
        }
    }
}

const SQLITE: &str = "sqlite://ledger.db";

/// A call approved by alice, completed; its execution id.
async fn approved_call(served: &Served, customer: &str) -> String {
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let args = json!({"customer": customer, "amount": 5});
    let first = mcp.call("pay_invoice", args.clone(), json!({})).await;
    let id = execution(&first)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _, err) = operator(served, &["approvals", "approve", &id]);
    assert_eq!(code, 0, "{err}");
    for _ in 0..100 {
        let done = mcp.call("pay_invoice", args.clone(), json!({})).await;
        if execution(&done)["state"] == "completed" {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the approved call of {customer} did not complete");
}

/// Rewrites the execution's `authorized` event to say mallory approved it, recomputes every
/// later hash of its chain, sets the head row, and deletes every checkpoint: no key needed.
async fn rewrite_approval(url: &str, execution: &str) {
    rewrite(url, execution, true).await;
}

/// As [`rewrite_approval`], the checkpoints deleted or kept.
async fn rewrite(url: &str, execution: &str, delete_checkpoints: bool) {
    macro_rules! rewrite {
        ($conn:ty) => {{
            let mut conn = <$conn>::connect(url).await.unwrap();
            let (chain, from): (String, i64) = sqlx::query_as(
                "SELECT chain, seq FROM events WHERE execution_id = $1 AND event = 'authorized'",
            )
            .bind(execution)
            .fetch_one(&mut conn)
            .await
            .unwrap();
            let rows: Vec<(i64, String, i64, String, i64, String, String)> = sqlx::query_as(
                "SELECT seq, execution_id, n, event, at, detail, prev_hash FROM events WHERE chain = $1 AND seq >= $2 ORDER BY seq",
            )
            .bind(&chain)
            .bind(from)
            .fetch_all(&mut conn)
            .await
            .unwrap();
            let mut prev = postern_core::hexdigits::decode32(&rows[0].6).unwrap();
            for (seq, id, n, event, at, detail, _) in rows {
                let mut detail: Value = serde_json::from_str(&detail).unwrap();
                if seq == from {
                    assert_eq!(detail["approved_by"], "alice", "{detail}");
                    detail["approved_by"] = json!("mallory");
                }
                let body = EventBody {
                    chain: chain.clone(),
                    seq: seq as u64,
                    execution_id: id.parse().unwrap(),
                    n: n as u32,
                    event: event.parse().unwrap(),
                    at: postern_core::Timestamp(at),
                    detail,
                };
                let (e, text) = ChainedEvent::link_keeping_detail(body, prev).unwrap();
                sqlx::query("UPDATE events SET detail = $1, prev_hash = $2, hash = $3 WHERE chain = $4 AND seq = $5")
                    .bind(text)
                    .bind(postern_core::hexdigits::encode(e.prev_hash))
                    .bind(postern_core::hexdigits::encode(e.hash))
                    .bind(&chain)
                    .bind(seq)
                    .execute(&mut conn)
                    .await
                    .unwrap();
                prev = e.hash;
            }
            sqlx::query("UPDATE chains SET head_hash = $1 WHERE chain = $2")
                .bind(postern_core::hexdigits::encode(prev))
                .bind(&chain)
                .execute(&mut conn)
                .await
                .unwrap();
            if delete_checkpoints {
                sqlx::query("DELETE FROM checkpoints")
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            conn.close().await.unwrap();
        }};
    }
    if url.starts_with("postgres") {
        rewrite!(sqlx::PgConnection)
    } else {
        rewrite!(sqlx::SqliteConnection)
    }
}

/// How many checkpoints the store holds.
async fn checkpoints(url: &str) -> i64 {
    macro_rules! count {
        ($conn:ty) => {{
            let mut conn = <$conn>::connect(url).await.unwrap();
            let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM checkpoints")
                .fetch_one(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
            n
        }};
    }
    if url.starts_with("postgres") {
        count!(sqlx::PgConnection)
    } else {
        count!(sqlx::SqliteConnection)
    }
}

fn verify(dir: &Path, store: &str, args: &[&str]) -> (i32, String) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_postern"))
        .current_dir(dir)
        .args(["audit", "verify", "--store", store, "--public-key"])
        .arg(public_key_file(dir))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn status(served: &Served) -> Value {
    let (_, out, err) = operator(served, &["status", "--json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"))
}

async fn the_running_gateway_never_signs_a_rewritten_history(tag: &str, store: &str) {
    let Signing {
        _target,
        dir,
        url,
        served,
    } = Signing::start(tag, store, "").await;
    let id = approved_call(&served, "rewrite-co").await;
    // Signed normally first: the store verifies with a signed tail.
    let mut signed = false;
    for _ in 0..60 {
        if verify(&dir.0, &url, &["--require-signed-tail"]).0 == 0 {
            signed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(signed, "the running gateway did not sign its head");
    assert!(status(&served)["signing_refused"].is_null());

    rewrite_approval(&url, &id).await;
    // Three signing periods and a call later: nothing was signed, and the gateway says why.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    approved_call(&served, "after-rewrite-co").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        checkpoints(&url).await,
        0,
        "the gateway signed a head it did not write"
    );
    let s = status(&served);
    let why = s["signing_refused"]
        .as_str()
        .unwrap_or_else(|| panic!("{s}"));
    assert!(why.contains("seq"), "{why}");
    let (code, out, _) = operator(&served, &["status"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("checkpoints are no longer signed"), "{out}");
    let (code, report) = verify(&dir.0, &url, &["--require-signed-tail"]);
    assert_eq!(code, 1, "{report}");
    assert!(
        !report.contains("\nVALID") || report.contains("REFUSED"),
        "{report}"
    );
    // The metric says it too.
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", served.url.trim_end_matches("/mcp")))
        .bearer_auth(ALICE_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("postern_audit_signing_refused 1"),
        "{metrics}"
    );
    served.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_rewritten_under_a_running_gateway_is_never_signed_sqlite() {
    the_running_gateway_never_signs_a_rewritten_history("signer-sqlite", SQLITE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_rewritten_under_a_running_gateway_is_never_signed_postgres() {
    let url = crate::harness::fresh_postgres().await;
    the_running_gateway_never_signs_a_rewritten_history("signer-pg", &url).await;
}

/// The same rewrite while the gateway is down, checkpoints deleted: offline, old unsigned
/// history is a break by default, and the witness file holds the checkpoints the store lost —
/// `audit verify --witness` says so, and the restarted gateway refuses to sign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_rewritten_while_the_gateway_was_down_is_caught_offline_and_by_the_witness() {
    let witness_config = "\n[audit.witness]\nfile = \"witness.jsonl\"\n";
    let Signing {
        _target,
        dir,
        url,
        served,
    } = Signing::start("signer-witness", SQLITE, witness_config).await;
    let id = approved_call(&served, "witness-co").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    approved_call(&served, "witness-co-2").await;
    served.stop();
    let witness = dir.0.join("witness.jsonl");
    let witnessed = std::fs::read_to_string(&witness).unwrap();
    assert!(witnessed.lines().count() >= 2, "{witnessed}");
    let w = witness.to_str().unwrap();
    // Normally checkpointed: VALID with default flags, and against the witness.
    let (code, report) = verify(&dir.0, &url, &[]);
    assert_eq!(code, 0, "{report}");
    let (code, report) = verify(&dir.0, &url, &["--witness", w]);
    assert_eq!(code, 0, "{report}");

    rewrite_approval(&url, &id).await;
    // Once the events are older than checkpoint_every + grace, unsigned history is a break.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (code, report) = verify(&dir.0, &url, &["--checkpoint-every", "1s", "--grace", "0s"]);
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("BREAK unsigned history"), "{report}");
    let (code, report) = verify(&dir.0, &url, &["--witness", w]);
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("witnessed checkpoint missing"), "{report}");
    assert!(
        report.contains("checkpoint mismatch") || report.contains("signed head"),
        "{report}"
    );

    // Restarted on the rewritten store, the gateway signs nothing and says why.
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let s = status(&served);
    let why = s["signing_refused"]
        .as_str()
        .unwrap_or_else(|| panic!("{s}"));
    assert!(why.contains("witness"), "{why}");
    assert_eq!(checkpoints(&url).await, 0);
    served.stop();
}

/// The same rewrite while the gateway is down, its checkpoints kept: the restarted gateway
/// checks the chain from its last checkpoint before it signs, and refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_rewritten_while_the_gateway_was_down_is_not_signed_after_a_restart() {
    let Signing {
        _target,
        dir,
        url,
        served,
    } = Signing::start("signer-restart", SQLITE, "").await;
    let id = approved_call(&served, "restart-co").await;
    served.stop();
    let before = checkpoints(&url).await;
    assert!(before > 0);
    rewrite(&url, &id, false).await;
    let served = Served::spawn(&dir.0, "127.0.0.1:0");
    let mut refused = None;
    for _ in 0..50 {
        refused = status(&served)["signing_refused"]
            .as_str()
            .map(str::to_string);
        if refused.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let why = refused.expect("the restarted gateway did not refuse to sign");
    assert!(why.contains("no longer has the hash"), "{why}");
    approved_call(&served, "restart-co-2").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(checkpoints(&url).await, before, "a checkpoint was signed");
    served.stop();
}

/// Checkpoints form a chain: a deleted one in the middle is a break naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_checkpoint_is_a_break_in_the_checkpoint_chain() {
    let Signing {
        _target,
        dir,
        url,
        served,
    } = Signing::start("signer-chain", SQLITE, "").await;
    for i in 0..3 {
        approved_call(&served, &format!("chain-co-{i}")).await;
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    served.stop();
    assert!(checkpoints(&url).await >= 3);
    let (code, report) = verify(&dir.0, &url, &[]);
    assert_eq!(code, 0, "{report}");
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let seqs: Vec<i64> = sqlx::query_scalar("SELECT seq FROM checkpoints ORDER BY seq")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    sqlx::query("DELETE FROM checkpoints WHERE seq = $1")
        .bind(seqs[1])
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let (code, report) = verify(&dir.0, &url, &[]);
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains(&format!(
            "checkpoint chain broken at seq {} (chain main): it names the previous checkpoint at seq {}",
            seqs[2], seqs[1]
        )),
        "{report}"
    );
}

/// Operator decisions are chained: an edited run authorization or an accepted tool's pin in
/// the store is a break naming the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_run_authorization_is_a_break() {
    let robot = "\n[[actor]]\nname = \"robot\"\ntoken = { file = \"robot.token\" }\nsession_approval = \"required\"\n";
    let Signing {
        _target,
        dir,
        url,
        served,
    } = Signing::start("signer-runs", SQLITE, robot).await;
    let run = Mcp::connect(&served.url, crate::approvals::ROBOT_TOKEN).await;
    let first = run
        .call(
            "create_invoice",
            json!({"customer": "run-co", "amount": 1}),
            json!({}),
        )
        .await;
    let run_id = execution(&first)["decision"]["waits_for_run"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _, err) = operator(&served, &["sessions", "authorize", &run_id]);
    assert_eq!(code, 0, "{err}");
    served.stop();
    let (code, report) = verify(&dir.0, &url, &[]);
    assert_eq!(code, 0, "{report}");
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE runs SET authorized_by = 'mallory' WHERE id = $1")
        .bind(&run_id)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let (code, report) = verify(&dir.0, &url, &[]);
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains("its authorized_by is \"mallory\" but the chained decision says \"alice\""),
        "{report}"
    );
}

/// An intent slot decides which execution an identical retry meets: pointed at another
/// execution (a retry would be answered with someone else's result), or deleted with its
/// execution's row (a retry would act again), it is a break.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_slot_pointed_at_another_execution_is_a_break() {
    let Signing {
        _target,
        dir,
        url,
        served,
    } = Signing::start("signer-intents", SQLITE, "").await;
    let first = approved_call(&served, "intent-co-1").await;
    let second = approved_call(&served, "intent-co-2").await;
    served.stop();
    let (code, report) = verify(&dir.0, &url, &[]);
    assert_eq!(code, 0, "{report}");
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let moved = sqlx::query("UPDATE intents SET execution_id = $1 WHERE execution_id = $2")
        .bind(&first)
        .bind(&second)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(moved.rows_affected(), 1);
    conn.close().await.unwrap();
    let (code, report) = verify(&dir.0, &url, &[]);
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains(&format!("intents slot naming {first}: its fingerprint is")),
        "{report}"
    );
}

/// Processes that share a SQLite chain sign checkpoints too: two `audit export`s between the
/// gateway's own signatures each name the one before, and the gateway follows them back to
/// its own last checkpoint and keeps signing (a false refusal would stop it for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_another_process_signs_on_the_chain_are_followed() {
    let Signing {
        _target,
        dir,
        url,
        served,
    } = Signing::start("signer-exports", SQLITE, "").await;
    let export = |n: u32| {
        let out = Command::new(env!("CARGO_BIN_EXE_postern"))
            .current_dir(&dir.0)
            .args(["audit", "export", "-c", "postern.toml", "--out"])
            .arg(dir.0.join(format!("export-{n}.jsonl")))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    approved_call(&served, "exports-co-0").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for n in 1..=2 {
        approved_call(&served, &format!("exports-co-{n}")).await;
        export(n);
    }
    approved_call(&served, "exports-co-3").await;
    let before = checkpoints(&url).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let s = status(&served);
    assert!(s["signing_refused"].is_null(), "{s}");
    assert!(
        checkpoints(&url).await > before,
        "the gateway stopped signing"
    );
    served.stop();
    let (code, report) = verify(&dir.0, &url, &[]);
    assert_eq!(code, 0, "{report}");
}

/// Issue 48 point 6: `audit export -c DIR/postern.toml` run from another directory read the
/// store relative to the working directory, created an empty one there and exported 0 events,
/// which `audit verify --file` called VALID. The store is the config's, as `serve` reads it,
/// an export never creates a store, and an empty log is "nothing to verify" (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_reads_the_configs_store_from_any_directory_and_an_empty_log_proves_nothing() {
    let Signing {
        _target,
        dir,
        url: _,
        served,
    } = Signing::start("signer-export-dir", SQLITE, "").await;
    approved_call(&served, "export-dir-co").await;
    served.stop();
    let elsewhere = Dir::new("signer-export-elsewhere");
    let out = elsewhere.0.join("export.jsonl");
    let run = |args: &[&std::ffi::OsStr]| {
        let o = Command::new(env!("CARGO_BIN_EXE_postern"))
            .current_dir(&elsewhere.0)
            .args(args)
            .output()
            .unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        (o.status.code().unwrap_or(-1), text)
    };
    let config = dir.0.join("postern.toml");
    let (code, text) = run(&[
        "audit".as_ref(),
        "export".as_ref(),
        "-c".as_ref(),
        config.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(
        !elsewhere.0.join("ledger.db").exists(),
        "a store was created in the working directory"
    );
    let exported = std::fs::read_to_string(&out).unwrap();
    assert!(
        exported
            .lines()
            .filter(|l| l.starts_with("{\"event\""))
            .count()
            > 3,
        "{exported}"
    );
    // An export of a store that is not there is refused, not an empty file.
    let missing = elsewhere.0.join("missing.toml");
    std::fs::write(&missing, std::fs::read_to_string(&config).unwrap()).unwrap();
    for f in [
        "fp.key",
        "signing.key",
        "billing.token",
        "ops.token",
        "alice.token",
        "robot.token",
    ] {
        let _ = std::fs::copy(dir.0.join(f), elsewhere.0.join(f));
    }
    let (code, text) = run(&[
        "audit".as_ref(),
        "export".as_ref(),
        "-c".as_ref(),
        missing.as_os_str(),
        "--out".as_ref(),
        elsewhere.0.join("empty.jsonl").as_os_str(),
    ]);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("there is no store at"), "{text}");
    // A log with no events (a store nothing was written to) proves nothing.
    let empty = format!("sqlite://{}", elsewhere.0.join("empty.db").display());
    let (ledger, _) = postern_ledger::Ledger::open(&empty, Default::default())
        .await
        .unwrap();
    ledger.close().await;
    let (code, text) = verify(&elsewhere.0, &empty, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("NOTHING TO VERIFY"), "{text}");
}

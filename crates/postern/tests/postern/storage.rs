//! Storage faults end to end (issue 12): a SQLite store on a tiny tmpfs that fills up, and a
//! private PostgreSQL cluster restarted under load. New calls are refused before anything is
//! sent; an outcome the store cannot take is answered honestly and recorded once it can;
//! nothing already recorded is lost; the gateway itself never needs a restart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use postern_demo::target::{InvoiceApi, Mode};
use serde_json::{json, Value};

use crate::harness::{config, eventually, execution, posts, Dir, Mcp, Served, BILLING_TOKEN};

/// A tmpfs of `size` mounted on a fresh directory; unmounted when dropped. CI runs as root.
struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    fn mount(at: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mounting a tmpfs needs root (CI runs as root): {status}"
        );
        SmallDisk {
            at: at.to_path_buf(),
        }
    }

    /// Fills the disk with a file until writes fail with "no space left".
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.at.join("filler")).unwrap();
        let chunk = vec![0u8; 16 * 1024];
        loop {
            match f.write_all(&chunk).and_then(|()| f.sync_all()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        // Even a byte no longer fits.
        let mut rest = std::fs::File::create(self.at.join("filler2")).unwrap();
        let _ = rest.write_all(&chunk);
    }

    fn free(&self) {
        let _ = std::fs::remove_file(self.at.join("filler"));
        let _ = std::fs::remove_file(self.at.join("filler2"));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// A gateway whose SQLite store lives on a 4 MiB tmpfs.
async fn on_small_disk(
    tag: &str,
) -> (
    postern_demo::target::InvoiceApiHandle,
    Dir,
    SmallDisk,
    Served,
) {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new(tag);
    let disk = SmallDisk::mount(&dir.0.join("disk"), "4m");
    let text = config(&target.url("")).replace(
        "store = \"sqlite://ledger.db\"",
        "store = \"sqlite://disk/ledger.db\"",
    );
    let served = Served::start(&dir.0, &text);
    (target, dir, disk, served)
}

async fn invoice(mcp: &Mcp, customer: &str) -> Value {
    mcp.call(
        "create_invoice",
        json!({"customer": customer, "amount": 5}),
        json!({}),
    )
    .await
}

fn postern(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(args)
        .output()
        .unwrap()
}

/// After the gateway stopped: the store verifies and holds `n` executions, all completed.
fn assert_store_intact(dir: &Path, n: usize) {
    let store = format!("sqlite://{}", dir.join("disk/ledger.db").display());
    let public = crate::harness::public_key_file(dir);
    let out = postern(&[
        "audit",
        "verify",
        "--store",
        &store,
        "--public-key",
        public.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let out = postern(&["activity", "list", "--json", "--store", &store]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = list.as_array().cloned().unwrap_or_default();
    assert_eq!(list.len(), n, "{list:?}");
    for e in &list {
        assert!(
            e.to_string().contains("completed") || e.to_string().contains("delivered"),
            "{e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_new_calls_before_anything_is_sent_and_loses_nothing() {
    let (target, dir, disk, served) = on_small_disk("disk-full").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    for i in 0..3 {
        let r = invoice(&mcp, &format!("before-{i}")).await;
        assert_eq!(execution(&r)["state"], "completed", "{r}");
    }

    disk.fill();
    let refused = invoice(&mcp, "while-full").await;
    let error = &refused["error"];
    assert_eq!(error["code"], -32005, "{refused}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("nothing was sent"), "{refused}");
    assert!(message.contains("full"), "the fault is named: {refused}");
    assert_eq!(error["data"]["sent"], false, "{refused}");
    assert_eq!(posts(&target.state), 3, "nothing reached the target");

    // Space again: the gateway takes calls without a restart, the refused one included.
    disk.free();
    let r = invoice(&mcp, "while-full").await;
    assert_eq!(execution(&r)["state"], "completed", "{r}");
    assert_eq!(posts(&target.state), 4);
    served.stop();
    assert_store_intact(&dir.0, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_the_store_cannot_take_is_answered_honestly_and_recorded_later() {
    let (target, dir, disk, served) = on_small_disk("disk-full-after").await;
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let r = invoice(&mcp, "warm-up").await;
    assert_eq!(execution(&r)["state"], "completed", "{r}");

    // The request is on its way (dispatched is durable) when the disk fills.
    target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_millis(1500)));
    let call = {
        let url = served.url.clone();
        tokio::spawn(async move {
            let mcp = Mcp::connect(&url, BILLING_TOKEN).await;
            invoice(&mcp, "sent-while-full").await
        })
    };
    let api = target.state.clone();
    eventually("the target received the POST", || posts(&api) == 2).await;
    disk.fill();
    let answered = call.await.unwrap();
    assert!(answered["error"].is_null(), "{answered}");
    assert!(
        matches!(
            answered["result"]["isError"],
            Value::Null | Value::Bool(false)
        ),
        "not an error: the request was sent: {answered}"
    );
    let ex = execution(&answered);
    let id = ex["execution_id"].as_str().unwrap().to_string();
    let next = ex["next_step"].as_str().unwrap_or_default();
    assert!(
        next.starts_with("the request was sent, but its outcome could not be recorded"),
        "{answered}"
    );
    assert!(
        next.contains("do not repeat this as a new action"),
        "{answered}"
    );

    // Meanwhile the identical call is not a second invoice.
    let again = invoice(&mcp, "sent-while-full").await;
    assert_eq!(posts(&target.state), 2, "{again}");

    // Space again: the gateway writes the outcome it kept, and the record says completed.
    disk.free();
    let mut settled = Value::Null;
    for _ in 0..100 {
        let status = mcp
            .call("execution_status", json!({"execution_id": id}), json!({}))
            .await;
        if execution(&status)["state"] == "completed" || execution(&status)["state"] == "delivered"
        {
            settled = status;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!settled.is_null(), "the kept outcome was never recorded");
    let again = invoice(&mcp, "sent-while-full").await;
    assert_eq!(execution(&again)["execution_id"], id.as_str(), "{again}");
    assert_eq!(posts(&target.state), 2, "still one invoice: {again}");
    assert_eq!(target.state.count_for("sent-while-full"), 1);
    served.stop();
    assert_store_intact(&dir.0, 2);
}

/// How the calls made during a restart were answered.
#[derive(Debug, Default)]
struct Tally {
    completed: usize,
    /// Refused before anything was sent (the store could not record the call).
    refused: usize,
    /// Sent, with the outcome kept until the store takes it.
    sent_unrecorded: Vec<String>,
    other: Vec<Value>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_under_load_costs_no_restart_of_the_gateway_and_no_lost_call() {
    let pg = postern_testkit::postgres::PrivatePostgres::start();
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("pg-restart");
    let text = config(&target.url("")).replace(
        "store = \"sqlite://ledger.db\"",
        &format!("store = \"{}\"", pg.url()),
    );
    let served = Served::start(&dir.0, &text);
    let url = served.url.clone();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mcp = Mcp::connect(&url, BILLING_TOKEN).await;
            let mut tally = Tally::default();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                i += 1;
                let r = invoice(&mcp, &format!("load-{i}")).await;
                let ex = execution(&r);
                if ex["state"] == "completed" {
                    tally.completed += 1;
                } else if r["error"]["code"] == -32005 {
                    tally.refused += 1;
                } else if ex["state"] == "dispatched"
                    && ex["next_step"]
                        .as_str()
                        .is_some_and(|s| s.contains("could not be recorded"))
                {
                    tally
                        .sent_unrecorded
                        .push(ex["execution_id"].as_str().unwrap().into());
                } else {
                    tally.other.push(r);
                }
            }
            tally
        })
    };
    let api = target.state.clone();
    eventually("calls flowing", || posts(&api) >= 5).await;
    pg.pg_ctl("restart");
    let after_restart = posts(&target.state);
    eventually("calls flowing again after the restart", || {
        posts(&api) >= after_restart + 5
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let tally = load.await.unwrap();

    eprintln!("calls during the restart: {tally:?}");
    assert!(
        tally.refused + tally.sent_unrecorded.len() > 0,
        "the restart was felt by some call: {tally:?}"
    );
    assert!(
        tally.other.is_empty(),
        "unexpected answers: {:?}",
        tally.other
    );
    assert_eq!(
        posts(&target.state),
        tally.completed + tally.sent_unrecorded.len(),
        "every POST the target saw was answered as sent, and nothing refused was sent: {tally:?}"
    );
    // Outcomes kept during the outage reach the record.
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    for id in &tally.sent_unrecorded {
        let mut state = Value::Null;
        for _ in 0..100 {
            let status = mcp
                .call("execution_status", json!({"execution_id": id}), json!({}))
                .await;
            state = execution(&status)["state"].clone();
            if state == "completed" || state == "delivered" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            state == "completed" || state == "delivered",
            "{id}: {state}"
        );
    }
    let r = invoice(&mcp, "after").await;
    assert_eq!(execution(&r)["state"], "completed", "{r}");
    served.stop();
}

/// Retention end to end: with a 1 s retention the running gateway prunes finished executions
/// by itself, keeps an unsettled one, and both the store and an export of it still verify, saying
/// how many events retention removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_prunes_past_retention_and_the_audit_chain_still_verifies() {
    let target = InvoiceApi::start().await.unwrap();
    let dir = Dir::new("retention");
    let text = config(&target.url(""))
        .replace("[gateway]\n", "[gateway]\nretention = \"1s\"\n")
        .replace("match_window = \"10m\"", "match_window = \"1s\"");
    let served = Served::start(&dir.0, &text);
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    for i in 0..6 {
        let r = invoice(&mcp, &format!("old-{i}")).await;
        assert_eq!(execution(&r)["state"], "completed", "{r}");
    }
    // A wire whose answer is lost stays unsettled, and is never pruned.
    target.state.set_mode(Mode::HangOnce);
    let lost = mcp
        .call(
            "send_wire",
            json!({"customer": "kept", "amount": 1}),
            json!({}),
        )
        .await;
    let kept = execution(&lost)["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(execution(&lost)["state"], "outcome_unknown", "{lost}");
    let store = served.store();
    let listed = |store: &str| -> Vec<Value> {
        let out = postern(&["activity", "list", "--json", "--store", store]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let mut left = Vec::new();
    for _ in 0..80 {
        left = listed(&store);
        if left.len() <= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(left.len() <= 2, "not pruned: {left:?}");
    assert!(
        left.iter().any(|e| e.to_string().contains(&kept)),
        "{left:?}"
    );
    served.stop();

    let public = crate::harness::public_key_file(&dir.0);
    let public = public.to_str().unwrap();
    let out = postern(&["audit", "verify", "--store", &store, "--public-key", public]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("pruned by retention"), "{text}");
    let export = dir.0.join("audit.jsonl");
    let signing = dir.0.join("signing.key");
    let out = postern(&[
        "audit",
        "export",
        "--store",
        &store,
        "--signing-key",
        signing.to_str().unwrap(),
        "--out",
        export.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = postern(&[
        "audit",
        "verify",
        "--file",
        export.to_str().unwrap(),
        "--public-key",
        public,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("pruned by retention"), "{text}");
}

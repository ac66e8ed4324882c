//! The end of the audit chain (issue 12): events no signed checkpoint covers, the gateway's
//! periodic checkpoints, anchors recorded outside the store, and stored results against the
//! digests their events chained. Uses the audit module's fixture (a real ledger and the real
//! binary).

use std::process::Command;

use postern_audit::{ChainedEvent, EventBody, ExportHeader, ExportLine, SigningKey};
use postern_core::config::Config;

use crate::audit::{Fixture, HEAD};

/// The log cut after `kept_to`: checkpoints past it removed, and the header's ranges and head
/// edited to end there and signed again, as only someone holding the signing key could, so that
/// neither says anything was cut.
fn cut_log(lines: &[String], kept_to: u64) -> Vec<String> {
    let key = SigningKey::from_bytes(crate::audit::SIGNING_KEY);
    let kept_hash = event_of(lines, kept_to).hash;
    lines
        .iter()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let past = ["event", "checkpoint"]
                .iter()
                .any(|kind| v[kind]["seq"].as_u64().is_some_and(|seq| seq > kept_to));
            if past {
                return None;
            }
            match postern_audit::read_line(l) {
                Ok(ExportLine::Header(mut header)) => {
                    for r in &mut header.ranges {
                        r.to = kept_to;
                    }
                    for h in header.heads.iter_mut().flatten() {
                        (h.seq, h.hash) = (kept_to, kept_hash);
                    }
                    let header = header.signed(&key).unwrap();
                    Some(serde_json::to_string(&ExportLine::Header(header)).unwrap())
                }
                _ => Some(l.clone()),
            }
        })
        .collect()
}

/// The event at `seq` of an export's lines.
fn event_of(lines: &[String], seq: u64) -> ChainedEvent {
    lines
        .iter()
        .find_map(|l| match postern_audit::read_line(l) {
            Ok(ExportLine::Event(e)) if e.body.seq == seq => Some(e),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no event at seq {seq}"))
}

/// The header of `lines` as written before exports named chain heads: without them, signed
/// again (as that version signed it).
fn without_heads(lines: &[String]) -> Vec<String> {
    let key = SigningKey::from_bytes(crate::audit::SIGNING_KEY);
    let mut lines = lines.to_vec();
    let Ok(ExportLine::Header(header)) = postern_audit::read_line(&lines[0]) else {
        panic!("no header first: {}", lines[0]);
    };
    let header = ExportHeader {
        heads: None,
        ..header
    }
    .signed(&key)
    .unwrap();
    lines[0] = serde_json::to_string(&ExportLine::Header(header)).unwrap();
    lines
}

/// The export with the event at `seq` changed (its `at`), every hash from it on recomputed,
/// and the checkpoints from it on dropped: what someone without the key can do.
fn rewrite_from(lines: &[String], seq: u64) -> Vec<String> {
    let mut prev = None;
    lines
        .iter()
        .filter_map(|l| match postern_audit::read_line(l).unwrap() {
            ExportLine::Checkpoint(c) if c.seq >= seq => None,
            ExportLine::Event(mut e) if e.body.seq >= seq => {
                if e.body.seq == seq {
                    e.body.at.0 += 1;
                }
                e.prev_hash = prev.unwrap_or(e.prev_hash);
                e.hash = postern_audit::event_hash(&e.prev_hash, &e.body).unwrap();
                prev = Some(e.hash);
                Some(serde_json::to_string(&ExportLine::Event(e)).unwrap())
            }
            _ => Some(l.clone()),
        })
        .collect()
}

/// Issue 33: an export with one event changed, the hashes after it recomputed and the
/// checkpoints after it dropped verified VALID. The signed header names the head's hash, so it
/// is a break; an export from before heads were named is refused (its tail is unsigned).
#[test]
fn a_rewritten_export_is_a_break_at_the_signed_head() {
    let f = Fixture::new("file-rewrite");
    let lines = f.export();
    let seq = HEAD - 9;
    let rewritten = rewrite_from(&lines, seq);
    let expected = [format!(
        "signed head mismatch at seq {HEAD} (chain main): the export header names hash"
    )];
    f.verify_lines("rewritten.jsonl", &rewritten)
        .assert_breaks(&expected);
    // Accepting an unsigned tail does not accept a rewrite the header's head contradicts.
    let path = f.dir.join("rewritten.jsonl");
    let lenient = f.postern(&[
        "audit",
        "verify",
        "--file",
        path.to_str().unwrap(),
        "--public-key",
        &f.public_key,
        "--allow-unsigned-tail",
    ]);
    lenient.assert_breaks(&expected);
    // The same rewrite of an export whose header names no heads.
    let old = f.verify_lines(
        "rewritten-old.jsonl",
        &rewrite_from(&without_heads(&lines), seq),
    );
    assert_eq!(old.code, Some(1), "{old}");
    assert!(
        old.stdout
            .contains("the export header names no chain heads"),
        "{old}"
    );
    assert!(
        old.stdout.contains("REFUSED (a signed tail is required"),
        "{old}"
    );
}

/// A notice after `head`: its own execution's only event, so nothing but its place says it is
/// forged.
fn forged_body(head: &ChainedEvent) -> EventBody {
    EventBody {
        execution_id: postern_core::ExecutionId::from_bytes([9; 16]),
        n: 1,
        event: postern_core::EventKind::Notice,
        detail: serde_json::json!({"notice": "forged"}),
        ..head.body.clone()
    }
}

/// Issue 33: a forged event appended after the signed header's range verified VALID.
#[test]
fn an_event_appended_after_the_signed_head_is_a_break() {
    let f = Fixture::new("file-append");
    let mut lines = f.export();
    let head = event_of(&lines, HEAD);
    let body = EventBody {
        seq: HEAD + 1,
        ..forged_body(&head)
    };
    let hash = postern_audit::event_hash(&head.hash, &body).unwrap();
    let forged = ChainedEvent {
        body,
        prev_hash: head.hash,
        hash,
    };
    lines.push(serde_json::to_string(&ExportLine::Event(forged)).unwrap());
    f.verify_lines("appended.jsonl", &lines)
        .assert_breaks(&[format!(
            "event past the signed head at seq {} (chain main): the export header names seq {HEAD}",
            HEAD + 1
        )]);
    // A forged chain of its own, which the header does not name.
    lines.pop();
    let body = EventBody {
        chain: "forged".into(),
        seq: 1,
        ..forged_body(&head)
    };
    let hash = postern_audit::event_hash(&postern_audit::GENESIS_HASH, &body).unwrap();
    let forged = ChainedEvent {
        body,
        prev_hash: postern_audit::GENESIS_HASH,
        hash,
    };
    lines.push(serde_json::to_string(&ExportLine::Event(forged)).unwrap());
    f.verify_lines("other-chain.jsonl", &lines).assert_breaks(&[
        "event of a chain the signed export header does not name at seq 1 (chain forged)",
    ]);
}

/// The export header is signed: its ranges edited without the key are a break, so a cut of
/// the tail cannot be hidden by editing them.
#[test]
fn an_edited_export_header_is_a_break() {
    let f = Fixture::new("edited-header");
    let mut lines = f.export();
    let mut header: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    header["header"]["ranges"][0]["to"] = serde_json::json!(HEAD - 3);
    lines[0] = header.to_string();
    let cut: Vec<String> = lines
        .into_iter()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            ["event", "checkpoint"]
                .iter()
                .all(|kind| v[kind]["seq"].as_u64().is_none_or(|seq| seq <= HEAD - 3))
        })
        .collect();
    f.verify_lines("edited-header.jsonl", &cut).assert_breaks(&[
        "export header at line 1 has a signature that does not verify with this key",
    ]);
    // And a header with its signature removed.
    let mut unsigned: serde_json::Value = serde_json::from_str(&cut[0]).unwrap();
    unsigned["header"]
        .as_object_mut()
        .unwrap()
        .remove("signature");
    let mut lines = cut.clone();
    lines[0] = unsigned.to_string();
    f.verify_lines("unsigned-header.jsonl", &lines)
        .assert_breaks(&["export header at line 1 is not signed"]);
}

/// Issue 12: cutting the last events together with the checkpoints after them left an export
/// that verified VALID with nothing said. Issue 33: events no signature covers are refused by
/// default (`--require-signed-tail`, once needed for that, is still accepted);
/// `--allow-unsigned-tail` accepts them with a warning. The export is one from before headers
/// named heads (with them, the head is signed: see `a_rewritten_export_is_a_break_at_the_signed_head`).
#[test]
fn a_cut_tail_with_its_checkpoints_is_refused_by_default() {
    let f = Fixture::new("file-unsigned-tail");
    let lines = f.export();
    let path = |name: &str| f.dir.join(name).to_str().unwrap().to_string();
    let verify = |file: &str, flag: &str| {
        f.postern(&[
            "audit",
            "verify",
            "--file",
            file,
            "--public-key",
            &f.public_key,
            flag,
        ])
    };
    // The clean export's head is signed: accepted, also with the old flag.
    std::fs::write(path("clean.jsonl"), lines.join("\n") + "\n").unwrap();
    let clean = verify(&path("clean.jsonl"), "--require-signed-tail");
    clean.assert_valid();
    assert!(
        !clean.stdout.contains("not covered by a signature"),
        "{clean}"
    );
    // With the header left as exported, its range alone catches a cut of the tail.
    let kept_to = HEAD - 3;
    let mut naive = cut_log(&lines, kept_to);
    naive[0] = lines[0].clone();
    f.verify_lines("naive-cut.jsonl", &naive).assert_breaks(&[
        format!("range not covered at seq {HEAD} (chain main)"),
        format!("cut before the signed head at seq {HEAD} (chain main)"),
    ]);
    // Cut the last three events and every checkpoint past what is left, and sign a header
    // that ends there too (someone holding the key), in the format without heads.
    let cut = cut_log(&without_heads(&lines), kept_to);
    assert!(cut.len() < lines.len());
    let signed_to = *f
        .checkpoints
        .iter()
        .filter(|s| **s <= kept_to)
        .max()
        .unwrap();
    let tail = kept_to - signed_to;
    let refused = f.verify_lines("cut.jsonl", &cut);
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(!refused.stdout.contains("BREAK"), "{refused}");
    let note = format!(
        "note: {tail} event(s) of chain main after the last signed checkpoint (seq {signed_to}) are not covered by a signature"
    );
    for said in [
        note.as_str(),
        "note: the export header names no chain heads",
        "REFUSED (a signed tail is required; --allow-unsigned-tail accepts one)",
    ] {
        assert!(refused.stdout.contains(said), "{said:?} not in {refused}");
    }
    let lenient = verify(&path("cut.jsonl"), "--allow-unsigned-tail");
    lenient.assert_valid();
    assert!(lenient.stdout.contains(&note), "{lenient}");
    assert!(
        lenient.stderr.contains("warning: --allow-unsigned-tail: 3 event(s) are covered by no signature; a cut or rewrite of them after the last signature would not be seen"),
        "{lenient}"
    );
    let both = f.postern(&[
        "audit",
        "verify",
        "--file",
        &path("cut.jsonl"),
        "--public-key",
        &f.public_key,
        "--allow-unsigned-tail",
        "--require-signed-tail",
    ]);
    assert_eq!(both.code, Some(2), "{both}");
}

/// Issue 12: the gateway signs its chain's head every `checkpoint_every` and at a graceful
/// stop, so a running gateway's log, and a stopped one's, verify with `--require-signed-tail`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_signs_its_head_periodically_and_at_stop() {
    use crate::harness::{config, execution, Dir, Mcp, Served, BILLING_TOKEN};
    let target = postern_demo::target::InvoiceApi::start().await.unwrap();
    let dir = Dir::new("signed-tail");
    let text = config(&format!("http://{}", target.addr))
        .replace("[gateway]\n", "[gateway]\ncheckpoint_every = \"1s\"\n");
    let served = Served::start(&dir.0, &text);
    let public = SigningKey::from_hex(
        std::fs::read_to_string(dir.0.join("signing.key"))
            .unwrap()
            .trim(),
    )
    .unwrap()
    .verifying_key()
    .to_string();
    let store = format!("sqlite://{}", dir.0.join("ledger.db").display());
    let verify = || {
        Command::new(env!("CARGO_BIN_EXE_postern"))
            .args([
                "audit",
                "verify",
                "--store",
                &store,
                "--public-key",
                &public,
            ])
            .arg("--require-signed-tail")
            .output()
            .unwrap()
    };
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    let call = |customer: &'static str| {
        let mcp = &mcp;
        async move {
            let r = mcp
                .call(
                    "create_invoice",
                    serde_json::json!({"customer": customer, "amount": 3}),
                    serde_json::json!({}),
                )
                .await;
            assert_eq!(execution(&r)["state"], "completed", "{r}");
        }
    };
    call("signed-co").await;
    // Within a couple of periods the head is signed by the running gateway.
    let mut signed = false;
    for _ in 0..40 {
        let out = verify();
        if out.status.success() {
            signed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(signed, "no checkpoint covered the head within 4 s");
    // The last call before a stop is signed by the stop.
    call("signed-late-co").await;
    served.stop();
    let out = verify();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Without a signing key, asking for checkpoints is a start-up error.
    let unsigned = text.replace("signing_key = { file = \"signing.key\" }\n", "");
    assert_ne!(unsigned, text);
    let bad = Config::parse(&unsigned, "unsigned.toml").unwrap_err();
    assert!(bad.to_string().contains("no signing_key"), "{bad}");
}

/// Issue 12: stored result bodies were never checked against the digests their events chained.
/// A body changed in place is a result mismatch at the event that vouched for it; a body
/// removed is a result missing.
#[test]
fn store_changed_or_removed_result_is_reported_at_its_event() {
    let f = Fixture::new("db-results");
    f.verify_store().assert_valid();
    // Execution 1's `completed` event (seq 4) chained its result's digest.
    let exe = "(SELECT execution_id FROM events WHERE seq = 4)";
    f.sql(&[format!(
        "UPDATE results SET body = CAST('{{\"invoice\":\"forged\"}}' AS BLOB) WHERE execution_id = {exe}"
    )]);
    let run = f.verify_store();
    run.assert_breaks(&["result mismatch at seq 4 (chain main): results/exe_"]);
    assert!(
        run.stdout
            .contains("the stored body, or the event, was changed"),
        "{run}"
    );
    // Execution 2's (seq 9) removed.
    f.sql(&[
        "DELETE FROM results WHERE execution_id = (SELECT execution_id FROM events WHERE seq = 9)"
            .into(),
    ]);
    f.verify_store().assert_breaks(&[
        "result mismatch at seq 4 (chain main)",
        "result missing at seq 9 (chain main)",
    ]);
}

/// Issue 12: a head recorded outside the store (`audit export` prints it) is checked with
/// `--expect-head`: the log must still hold that hash at that seq. A tail cut with its
/// checkpoints, which verifies VALID on its own, breaks the anchor.
#[test]
fn an_anchor_recorded_elsewhere_catches_a_cut_or_rewritten_log() {
    let f = Fixture::new("file-anchor");
    let out = f.dir.join("anchored.jsonl");
    let run = f.export_to(&out);
    let anchor = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("head "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no head printed: {run}"))
        .to_string();
    assert!(anchor.starts_with(&format!("main:{HEAD}:")), "{anchor}");
    let file = out.to_str().unwrap().to_string();
    let verify = |file: &str, anchor: &str| {
        f.postern(&[
            "audit",
            "verify",
            "--file",
            file,
            "--public-key",
            &f.public_key,
            "--expect-head",
            anchor,
        ])
    };
    verify(&file, &anchor).assert_valid();
    // Another hash at that seq: the log is not the one anchored.
    let (prefix, hash) = anchor.rsplit_once(':').unwrap();
    let other = format!(
        "{prefix}:{}",
        if hash.starts_with('0') { "1" } else { "0" }.repeat(64)
    );
    verify(&file, &other).assert_breaks(&[format!(
        "anchor mismatch at seq {HEAD} (chain main): the head recorded elsewhere has hash"
    )]);
    // The tail cut with the checkpoints after it and the header signed again to match (by
    // someone holding the key): VALID without the anchor, broken with it.
    let lines: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let cut = cut_log(&lines, HEAD - 2);
    f.verify_lines("cut-anchored.jsonl", &cut).assert_valid();
    let cut_file = f.dir.join("cut-anchored.jsonl");
    verify(cut_file.to_str().unwrap(), &anchor).assert_breaks(&[format!(
        "anchor mismatch at seq {HEAD} (chain main): the head recorded elsewhere (hash {hash}) is not in the log"
    )]);
    // A malformed anchor is a clear error.
    let bad = verify(&file, "main:xx:abc");
    assert_eq!(bad.code, Some(2), "{bad}");
    assert!(bad.stderr.contains("expected CHAIN:SEQ:HASH"), "{bad}");
}

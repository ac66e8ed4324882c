//! `postern fingerprint` as an operator uses it.

use std::path::PathBuf;
use std::process::{Command, Output};

const KEY: &str = "8f3c1e0b6a2d4f5e7c9b0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f";

/// The example config (what `postern init` writes), beside the fingerprint key file it names.
fn example_config() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("postern-fingerprint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/postern.toml");
        std::fs::copy(example, dir.join("postern.toml")).unwrap();
        crate::harness::write_private(&dir.join("postern.fingerprint.key"), KEY);
        dir
    });
    dir.join("postern.toml")
}

fn postern(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_postern"))
        .args(args)
        .output()
        .unwrap()
}

fn fingerprint(arguments: &str, extra: &[&str]) -> (String, String) {
    let config = example_config();
    let mut args = vec![
        "fingerprint",
        "--config",
        config.to_str().unwrap(),
        "--tool",
        "create_invoice",
        "--actor",
        "billing-agent",
        "--args",
        arguments,
    ];
    args.extend_from_slice(extra);
    let out = postern(&args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    (stdout, stderr)
}

fn fingerprint_line(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with("fingerprint"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string()
}

#[test]
fn key_order_does_not_matter_and_amount_does() {
    let (a, _) = fingerprint(r#"{"customer": "acme", "amount": 1250}"#, &[]);
    let (b, _) = fingerprint(r#"{ "amount":1250 , "customer":"acme" }"#, &[]);
    let (c, _) = fingerprint(r#"{"customer": "acme", "amount": 1251}"#, &[]);
    assert!(fingerprint_line(&a).starts_with("hmac-sha256:"), "{a}");
    assert_eq!(fingerprint_line(&a), fingerprint_line(&b));
    assert_ne!(fingerprint_line(&a), fingerprint_line(&c));
    assert!(a.contains(r#"record        {"actor":"billing-agent","arguments":{"amount":1250,"currency":"EUR","customer":"acme"}"#), "{a}");
}

#[test]
fn json_output_for_machines() {
    let (out, _) = fingerprint(
        r#"{"customer": "acme", "amount": 5, "trace_id": "t-1"}"#,
        &["--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tool"], "create_invoice");
    assert_eq!(v["class"], "idempotent_write");
    assert_eq!(v["match_window"], "10m");
    assert_eq!(
        v["record"]["arguments"],
        serde_json::json!({"amount": 5, "currency": "EUR", "customer": "acme"})
    );
    assert!(v["fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("hmac-sha256:"));
    let (plain, _) = fingerprint(r#"{"customer": "acme", "amount": 5}"#, &[]);
    assert_eq!(v["fingerprint"].as_str().unwrap(), fingerprint_line(&plain));
}

#[test]
fn a_secret_argument_never_appears_in_the_output() {
    let secret = "tok_live_4242424242424242";
    let args = format!(r#"{{"customer": "acme", "amount": 5, "card_token": "{secret}"}}"#);
    for extra in [&[][..], &["--json"][..]] {
        let (out, err) = fingerprint(&args, extra);
        assert!(!out.contains(secret) && !err.contains(secret), "{out}{err}");
        assert!(out.contains("secret:hmac-sha256:"), "{out}");
    }
    // Nor in an error about the same arguments.
    let config = example_config();
    let bad = format!(r#"{{"card_token": "{secret}", "card_token": "{secret}"}}"#);
    let out = postern(&[
        "fingerprint",
        "-c",
        config.to_str().unwrap(),
        "--tool",
        "create_invoice",
        "--actor",
        "billing-agent",
        "--args",
        &bad,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("duplicate object key \"card_token\""), "{err}");
    assert!(!err.contains(secret), "{err}");
}

#[test]
fn a_config_with_an_unknown_key_fails_with_file_line_and_key() {
    let dir = std::env::temp_dir().join(format!("postern-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("typo.toml");
    let text = std::fs::read_to_string(example_config()).unwrap().replace(
        "match_window = \"10m\"",
        "match_window = \"10m\"\nmatch_windw = \"5m\"",
    );
    std::fs::write(&path, &text).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("match_windw"))
        .unwrap()
        + 1;
    let out = postern(&[
        "fingerprint",
        "-c",
        path.to_str().unwrap(),
        "--tool",
        "create_invoice",
        "--actor",
        "billing-agent",
        "--args",
        "{}",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("typo.toml:{line}:1: unknown field `match_windw`")),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn clear_errors_for_unknown_tool_actor_and_short_key() {
    let config = example_config();
    let c = config.to_str().unwrap();
    let out = postern(&[
        "fingerprint",
        "-c",
        c,
        "--tool",
        "nope",
        "--actor",
        "billing-agent",
        "--args",
        "{}",
    ]);
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("tool \"nope\" is not declared; declared tools: create_invoice"));
    let out = postern(&[
        "fingerprint",
        "-c",
        c,
        "--tool",
        "create_invoice",
        "--actor",
        "mallory",
        "--args",
        "{}",
    ]);
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("actor \"mallory\" is not declared"));
    // The same config beside a key file that is too short.
    let short = std::env::temp_dir().join(format!("postern-short-key-{}", std::process::id()));
    std::fs::create_dir_all(&short).unwrap();
    std::fs::copy(&config, short.join("postern.toml")).unwrap();
    crate::harness::write_private(&short.join("postern.fingerprint.key"), "abcd");
    let out = Command::new(env!("CARGO_BIN_EXE_postern"))
        .args([
            "fingerprint",
            "-c",
            short.join("postern.toml").to_str().unwrap(),
            "--tool",
            "create_invoice",
            "--actor",
            "billing-agent",
            "--args",
            "{}",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&short);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("fingerprint key is 2 bytes; at least 32 are required"),
        "{err}"
    );
}

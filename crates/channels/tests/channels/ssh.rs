//! The SSH channel's pieces that need no sshd: quoting against a real `/bin/sh`, the command
//! template, and the marker protocol's scripts run by `sh -s` on this machine as a host would.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use postern_channels::ssh::command::{quote, render};
use postern_channels::ssh::marker::{
    dispatch_script, locate_script, parse, query_script, MarkerDir, Report,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn sh(script: &str) -> Vec<u8> {
    let mut child = Command::new("sh")
        .arg("-s")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap().stdout
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever the word, the shell sees exactly it, as one word.
    #[test]
    fn a_quoted_word_is_one_word_of_data(word in "[^\u{0}]{0,40}") {
        let out = sh(&format!("printf '%s|' {}\n", quote(&word)));
        prop_assert_eq!(String::from_utf8_lossy(&out), format!("{word}|"));
    }
}

#[test]
fn the_template_refuses_what_no_word_can_carry() {
    let args = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let id = |_: &str, v: String| v;
    let none = Map::new();
    assert_eq!(
        render(
            "echo {a} {n}",
            &args(json!({"a": "x y", "n": 3})),
            &none,
            &id
        )
        .unwrap(),
        "echo 'x y' '3'"
    );
    let defaults = args(json!({"n": 5}));
    assert_eq!(
        render("echo {n}", &none, &defaults, &id).unwrap(),
        "echo '5'"
    );
    for (arguments, why) in [
        (json!({"a": "x\u{0}y"}), "NUL"),
        (json!({"a": {"b": 1}}), "string, number or boolean"),
        (json!({}), "missing"),
    ] {
        let err = render("echo {a}", &args(arguments), &none, &id).unwrap_err();
        assert!(err.contains(why), "{err}");
    }
    let masked = render(
        "login {t}",
        &args(json!({"t": "secret"})),
        &none,
        &|n, v| {
            if n == "t" {
                "***".into()
            } else {
                v
            }
        },
    )
    .unwrap();
    assert_eq!(masked, "login '***'");
}

#[test]
fn a_report_is_read_only_whole_and_only_with_its_nonce() {
    let n = "POSTERN-1";
    let out = b"motd junk\nPOSTERN-2 none\nPOSTERN-1 claimed 42\nPOSTERN-1 finished 3 4 2\nabcdef";
    assert_eq!(
        parse(out, n),
        Some(Report::Finished {
            exit_code: 3,
            stdout: b"abcd".to_vec(),
            stderr: b"ef".to_vec()
        })
    );
    // Cut inside the output: no report (never a shortened result).
    assert_eq!(parse(&out[..out.len() - 1], n), None);
    assert_eq!(parse(b"POSTERN-1 claimed 42\n", n), Some(Report::Claimed));
    assert_eq!(parse(b"POSTERN-2 claimed 42\n", n), None);
}

/// The scripts, run by `sh -s` here exactly as a host runs them.
#[test]
fn the_marker_protocol_claims_once_and_tells_what_happened() {
    let dir = std::env::temp_dir().join(format!("postern-marker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let markers = dir.join("m");
    let d = markers.to_str().unwrap();
    let out = dir.join("out");
    let command = format!(
        "echo ran >> {}; echo hello; echo oops >&2; exit 4",
        out.display()
    );
    let dispatch = |nonce: &str, id: &str| {
        parse(
            &sh(&dispatch_script(
                nonce,
                id,
                "fp1",
                &command,
                None,
                MarkerDir::Recorded(d),
            )),
            nonce,
        )
    };
    let query = |id: &str, intent: &str| {
        parse(
            &sh(&query_script("Q", id, intent, MarkerDir::Recorded(d))),
            "Q",
        )
    };
    assert_eq!(
        dispatch("N1", "exe_a"),
        Some(Report::Finished {
            exit_code: 4,
            stdout: b"hello\n".to_vec(),
            stderr: b"oops\n".to_vec()
        })
    );
    // The same execution again: its claim holds, nothing runs.
    assert_eq!(dispatch("N2", "exe_a"), Some(Report::ClaimedBefore));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ran\n");
    assert!(matches!(
        query("exe_a", "fp1"),
        Some(Report::Finished { exit_code: 4, .. })
    ));
    assert_eq!(query("exe_a", "fp2"), Some(Report::Foreign));
    assert_eq!(query("exe_b", "fp1"), Some(Report::None));

    // Started, never finished, its process gone: it may have half-run.
    let dead = markers.join("exe_dead");
    std::fs::create_dir_all(dead.join("go")).unwrap();
    std::fs::write(dead.join("intent"), "fp1\n").unwrap();
    std::fs::write(dead.join("started"), "0 999999\n").unwrap();
    assert_eq!(query("exe_dead", "fp1"), Some(Report::Dead));

    // Claimed, the runner never started: the query takes the start gate, so it never will;
    // the marker stays (removing it would reopen the gate) and a dispatch finds it claimed.
    let claimed = markers.join("exe_claimed");
    std::fs::create_dir_all(&claimed).unwrap();
    std::fs::write(claimed.join("intent"), "fp1\n").unwrap();
    std::fs::write(claimed.join("command"), "echo with-a-secret\n").unwrap();
    assert_eq!(query("exe_claimed", "fp1"), Some(Report::Abandoned));
    assert!(claimed.join("go").exists());
    // The command (it may hold secret arguments) is not left behind for a runner that will
    // never start (issue 33).
    assert!(!claimed.join("command").exists());
    assert_eq!(dispatch("N3", "exe_claimed"), Some(Report::ClaimedBefore));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ran\n");

    // A marker directory that cannot be made: refused, nothing ran.
    let blocked = dir.join("file");
    std::fs::write(&blocked, "").unwrap();
    let script = dispatch_script(
        "N4",
        "exe_c",
        "fp1",
        &command,
        None,
        MarkerDir::Resolved(blocked.to_str()),
    );
    assert!(matches!(
        parse(&sh(&script), "N4"),
        Some(Report::Refused(_))
    ));
    let script = dispatch_script(
        "N5",
        "exe_d",
        "fp1",
        &command,
        Some("/nonexistent"),
        MarkerDir::Recorded(d),
    );
    assert!(matches!(
        parse(&sh(&script), "N5"),
        Some(Report::Refused(_))
    ));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ran\n");
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// What recovery does with a marker report (the gateway's rule for `Question::Marker`).
#[derive(Debug, PartialEq)]
enum Settled {
    Result,
    Review,
    Unsettled,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// The marker protocol under faults: the dispatch script cut at any byte (a connection lost
    /// mid-script), the runner killed at any moment, then retries that follow the recovery
    /// rule (`none` → dispatch the same execution again, `running`/`starting` → look again,
    /// `finished` → the result, `dead`/`foreign` → review). The command never runs twice; a
    /// `finished` report means it ran exactly once; "none" is never said of a command that ran.
    #[test]
    fn the_marker_never_lets_a_command_run_twice(
        cut in proptest::option::of(0usize..4000),
        kill_after_ms in proptest::option::of(0u64..250),
        rounds in 1usize..4,
    ) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("postern-marker-model-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.join("m");
        // Made before anything is recorded, as locating it does.
        std::fs::create_dir_all(&d).unwrap();
        let d = d.to_str().unwrap();
        let out = dir.join("out");
        let ran = || std::fs::read_to_string(&out).unwrap_or_default().lines().count();
        let command = format!("sleep 0.05; echo ran >> {}; sleep 0.1", out.display());
        let script = dispatch_script("N", "exe_m", "fp", &command, None, MarkerDir::Recorded(d));
        let first: String = match cut {
            Some(at) if at < script.len() => script.chars().take(at).collect(),
            _ => script.clone(),
        };
        // The first dispatch, perhaps cut, its runner perhaps killed.
        let mut child = Command::new("sh")
            .arg("-s")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(first.as_bytes()).unwrap();
        if let Some(ms) = kill_after_ms {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            if let Ok(started) = std::fs::read_to_string(Path::new(d).join("exe_m/started")) {
                // The runner only, and only while it is this case's runner (its pid could be
                // reused once it ended): its command may run on, as after a crash.
                let pid = started.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
                if let Some(pid) = pid.filter(|p| *p > 1) {
                    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    if String::from_utf8_lossy(&cmdline).contains(d) {
                        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                    }
                }
            }
        }
        let _ = child.wait();
        let mut settled = Settled::Unsettled;
        for _ in 0..rounds * 20 {
            let before = ran();
            let report = parse(&sh(&query_script("Q", "exe_m", "fp", MarkerDir::Recorded(d))), "Q");
            match report {
                Some(Report::None) => {
                    prop_assert_eq!(before, 0, "none was said of a command that ran");
                    let again = dispatch_script("N2", "exe_m", "fp", &command, None, MarkerDir::Recorded(d));
                    let _ = parse(&sh(&again), "N2");
                }
                Some(Report::Finished { .. }) => { settled = Settled::Result; break; }
                Some(Report::Dead | Report::Foreign | Report::Abandoned) => {
                    // Issue 33: a runner that started (and perhaps died) or was abandoned
                    // left no command file, which may hold secret arguments, on the host.
                    prop_assert!(!Path::new(d).join("exe_m/command").exists() || report == Some(Report::Foreign));
                    settled = Settled::Review;
                    break;
                }
                Some(Report::Running | Report::Starting) | None => {
                    std::thread::sleep(std::time::Duration::from_millis(30));
                }
                Some(other) => prop_assert!(false, "a query reported {other:?}"),
            }
        }
        // Let anything still detached finish before counting.
        std::thread::sleep(std::time::Duration::from_millis(250));
        prop_assert!(ran() <= 1, "the command ran {} times", ran());
        if settled == Settled::Result {
            prop_assert_eq!(ran(), 1);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Issue 33 point 9: the marker directory is learned as an absolute path before anything is
/// recorded; a query of a recorded directory that is gone or unreadable says so, never "none".
#[test]
fn the_marker_directory_is_learned_and_a_lost_one_is_not_none() {
    let dir = std::env::temp_dir().join(format!("postern-marker-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("home")).unwrap();
    let located = |dir_of: MarkerDir<'_>, home: &Path| {
        let script = format!(
            "HOME={}\n{}",
            quote(home.to_str().unwrap()),
            locate_script("L", dir_of)
        );
        parse(&sh(&script), "L")
    };
    // The host's default, under its $HOME, made and named absolutely.
    let home = dir.join("home");
    let expected = std::fs::canonicalize(&home).unwrap().join(".postern/exec");
    assert_eq!(
        located(MarkerDir::Resolved(None), &home),
        Some(Report::Located(expected.to_str().unwrap().to_string()))
    );
    assert!(expected.is_dir());
    // A path that cannot be a directory: refused, so no call is recorded against it.
    std::fs::write(dir.join("file"), "").unwrap();
    let blocked = dir.join("file/m");
    assert!(matches!(
        located(MarkerDir::Resolved(blocked.to_str()), &home),
        Some(Report::Refused(_))
    ));
    // The recorded directory, later gone (a cleaned $HOME, another user): not "none".
    let gone = dir.join("gone");
    let q = query_script(
        "Q",
        "exe_a",
        "fp1",
        MarkerDir::Recorded(gone.to_str().unwrap()),
    );
    assert_eq!(parse(&sh(&q), "Q"), Some(Report::Unreadable));
    // Present and without this execution's marker: none.
    let e = expected.to_str().unwrap();
    let q = query_script("Q", "exe_a", "fp1", MarkerDir::Recorded(e));
    assert_eq!(parse(&sh(&q), "Q"), Some(Report::None));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 33 point 9: a command that leaves a child holding its output open is finished when
/// the command itself exits, with the output it wrote; the child's later output is drained
/// and never corrupts the report.
#[test]
fn a_daemon_holding_the_output_does_not_keep_the_command_running() {
    let dir = std::env::temp_dir().join(format!("postern-marker-daemon-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("m")).unwrap();
    let d = dir.join("m");
    let d = d.to_str().unwrap();
    let command = "(sleep 3; echo late; sleep 5) & echo started; echo warn >&2; exit 3";
    let began = std::time::Instant::now();
    let report = parse(
        &sh(&dispatch_script(
            "N",
            "exe_d",
            "fp",
            command,
            None,
            MarkerDir::Recorded(d),
        )),
        "N",
    );
    let took = began.elapsed();
    assert_eq!(
        report,
        Some(Report::Finished {
            exit_code: 3,
            stdout: b"started\n".to_vec(),
            stderr: b"warn\n".to_vec()
        })
    );
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    // Later, the daemon's output has gone on into the capture; the report still reads whole.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let q = parse(
        &sh(&query_script("Q", "exe_d", "fp", MarkerDir::Recorded(d))),
        "Q",
    );
    assert!(
        matches!(&q, Some(Report::Finished { exit_code: 3, .. })),
        "{q:?}"
    );
    // Output over the cap is kept to the cap, and the command is not stopped by it.
    let command = "head -c 1100000 /dev/zero | tr '\\0' a; echo done >&2";
    let report = parse(
        &sh(&dispatch_script(
            "N",
            "exe_big",
            "fp",
            command,
            None,
            MarkerDir::Recorded(d),
        )),
        "N",
    );
    let Some(Report::Finished {
        exit_code,
        stdout,
        stderr,
    }) = report
    else {
        panic!("{report:?}");
    };
    assert_eq!((exit_code, stderr.as_slice()), (0, &b"done\n"[..]));
    assert_eq!(
        stdout.len() as u64,
        postern_channels::ssh::marker::CAPTURE_BYTES
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! `--instructions [--baseline-postern PATH] [--calls N] [--check FILE] [--eras LIST]
//! [--concurrency LIST]` (issue 52): the work one durable call costs the gateway process, as
//! instructions counted by valgrind's callgrind. Unlike a timing, the count repeats on a loaded
//! machine (callgrind counts instructions; it does not time them), so a change of a few percent
//! shows.
//!
//! Per build, protocol era and concurrency, two fresh gateways run under callgrind: one makes
//! N measured calls, the other 2N, after the same warm-up. Each is stopped with SIGTERM, so
//! callgrind writes its totals at exit; the difference over N is the count per call, with the
//! warm-up and shutdown taken out. Instructions are counted only from after a first warm-up
//! (`--instr-atstart=no`, then `callgrind_control -i on`): start-up calibrates the metrics
//! exporter's clock by spinning for a stretch of wall time, which moved the per-call figure by
//! up to 50,000 between runs when it was counted. The top functions by inclusive count of the
//! larger run are printed for the build under test.
//!
//! `--check FILE` compares the counts with the figures committed in FILE (`era c=N count` per
//! line) and exits 1 when any grew by more than 10 %: CI's guard. The commit that moves a
//! figure updates the file (`--write FILE` writes the counts measured).

use std::path::{Path, PathBuf};
use std::process::Command;

use postern_demo::target::{InvoiceApi, InvoiceApiHandle};

use super::{config, run, Budget, Served, SESSIONLESS, WITH_SESSION};

/// A count may grow this much over the committed figure before the guard fails.
const ALLOWED_GROWTH: f64 = 1.10;

pub struct Plan<'a> {
    pub builds: Vec<(&'static str, &'a Path)>,
    pub calls: usize,
    pub eras: Vec<&'static str>,
    pub concurrency: Vec<usize>,
    pub check: Option<PathBuf>,
    pub write: Option<PathBuf>,
    /// Added to every gateway's config (`--budget`: issue 53's two budgets).
    pub extra_config: &'static str,
    /// `--keep`: the callgrind files are kept, for `callgrind_annotate`.
    pub keep: bool,
}

/// The eras a `--eras` list names (both by default).
pub fn eras(list: Option<String>) -> Vec<&'static str> {
    let Some(list) = list else {
        return vec![WITH_SESSION, SESSIONLESS];
    };
    list.split(',')
        .map(|e| match e {
            WITH_SESSION => WITH_SESSION,
            SESSIONLESS => SESSIONLESS,
            other => panic!("--eras: {other:?} is not {WITH_SESSION} or {SESSIONLESS}"),
        })
        .collect()
}

/// Measures every build; returns false when `--check` found a count grown past the guard.
pub async fn compare(plan: &Plan<'_>, dir: &Path) -> bool {
    let api = InvoiceApi::start().await.unwrap();
    println!(
        "instructions per durable call in the gateway process (callgrind: runs of {} and {} calls, the difference over {})",
        plan.calls,
        2 * plan.calls,
        plan.calls
    );
    let mut counts: Vec<(String, &str, f64)> = Vec::new();
    for era in &plan.eras {
        for &c in &plan.concurrency {
            let key = format!("{era} c={c}");
            for (name, postern) in &plan.builds {
                let sub = dir.join(format!("instructions-{name}-{era}-c{c}"));
                let extra = plan.extra_config;
                let small = count(postern, &sub.join("n"), &api, extra, (era, c, plan.calls)).await;
                let large = count(
                    postern,
                    &sub.join("2n"),
                    &api,
                    extra,
                    (era, c, 2 * plan.calls),
                )
                .await;
                let per_call = (large.0 as f64 - small.0 as f64) / plan.calls as f64;
                // Twice the calls must cost more: anything else is a broken count, not a figure.
                assert!(
                    per_call > 0.0,
                    "{key} {name}: {per_call} instructions per call"
                );
                println!("{key:<16} {name:<9} {per_call:>12.0}");
                if *name == "candidate"
                    && era == plan.eras.last().unwrap()
                    && c == *plan.concurrency.last().unwrap()
                {
                    println!(
                        "  top functions by inclusive count ({} calls, warm-up included):",
                        2 * plan.calls
                    );
                    for line in top(&large.1, 12) {
                        println!("    {line}");
                    }
                }
                if !plan.keep {
                    let _ = std::fs::remove_dir_all(&sub);
                }
                counts.push((key.clone(), name, per_call));
            }
        }
    }
    if plan.builds.len() == 2 {
        println!("candidate ÷ baseline:");
        for (key, name, per_call) in &counts {
            if *name != "candidate" {
                continue;
            }
            if let Some((_, _, base)) = counts.iter().find(|(k, n, _)| k == key && *n == "baseline")
            {
                println!("{key:<16} {:>6.2}", per_call / base);
            }
        }
    }
    let measured: Vec<(String, f64)> = counts
        .iter()
        .filter(|(_, n, _)| *n == "candidate")
        .map(|(k, _, v)| (k.clone(), *v))
        .collect();
    if let Some(file) = &plan.write {
        let text: String = measured
            .iter()
            .map(|(k, v)| format!("{k} {v:.0}\n"))
            .collect();
        std::fs::write(file, text).expect("the figures file");
        println!("written to {}", file.display());
    }
    match &plan.check {
        Some(file) => guard(file, &measured),
        None => true,
    }
}

/// Compares `measured` with the figures committed in `file`; false when one grew past
/// [`ALLOWED_GROWTH`] (or has no committed figure).
fn guard(file: &Path, measured: &[(String, f64)]) -> bool {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("--check {}: {e}", file.display()));
    let committed: Vec<(String, f64)> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').expect("`era c=N count` per line");
            (key.to_string(), value.parse().expect("a count"))
        })
        .collect();
    let mut ok = true;
    for (key, now) in measured {
        let Some((_, then)) = committed.iter().find(|(k, _)| k == key) else {
            println!("guard: {key}: no committed figure in {}", file.display());
            ok = false;
            continue;
        };
        let ratio = now / then;
        let verdict = if ratio <= ALLOWED_GROWTH {
            "ok"
        } else {
            "GREW"
        };
        println!("guard: {key}: {now:.0} against {then:.0} committed: {ratio:.3}× ({verdict}, at most {ALLOWED_GROWTH}×)");
        ok &= ratio <= ALLOWED_GROWTH;
    }
    ok
}

/// One gateway under callgrind making `calls` measured calls: its total instruction count and
/// the callgrind output file.
async fn count(
    postern: &Path,
    dir: &Path,
    api: &InvoiceApiHandle,
    extra_config: &str,
    (era, concurrency, calls): (&'static str, usize, usize),
) -> (u64, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.join("callgrind.out");
    let wrapper = [
        "valgrind".to_string(),
        "--tool=callgrind".to_string(),
        "-q".to_string(),
        format!("--callgrind-out-file={}", out.display()),
        // Counting starts after the first warm-up (see the module doc); callgrind_control
        // reaches the tool through vgdb.
        "--instr-atstart=no".to_string(),
        "--vgdb=yes".to_string(),
    ];
    let served = Served::start_under(
        &wrapper,
        postern,
        dir,
        format!("{}{extra_config}", config(&api.url(""), "10m", None)),
        &[],
    );
    // Start-up and its first calls (clock calibration, lazy statics, the first connections)
    // happen uncounted.
    run(
        &api.state,
        Some(era),
        &served.url,
        concurrency,
        Budget::Calls(concurrency),
        "instructions-warm",
    )
    .await;
    // callgrind_control exits 0 whatever happened (it prints "Error: …" instead), so its
    // "OK." is what says counting is on; a switch that never happened would count nothing and
    // pass any guard. Bounded: it reaches the tool through vgdb, which could wait for ever.
    let switched = Command::new("timeout")
        .args([
            "60",
            "callgrind_control",
            "-i",
            "on",
            &served.pid().to_string(),
        ])
        .output()
        .expect("callgrind_control (Debian's valgrind package)");
    let said = String::from_utf8_lossy(&switched.stdout);
    assert!(
        switched.status.success() && said.contains("OK.") && !said.contains("Error"),
        "callgrind_control -i on did not switch counting on: {said}{}",
        String::from_utf8_lossy(&switched.stderr)
    );
    run(
        &api.state,
        Some(era),
        &served.url,
        concurrency,
        Budget::Calls(calls),
        "instructions",
    )
    .await;
    served.stop();
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("callgrind wrote no {}: {e}", out.display()));
    let total = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no totals in {}", out.display()));
    assert!(total > 0, "callgrind counted nothing in {}", out.display());
    (total, out)
}

/// What `callgrind_annotate` prints of `out`: the `n` functions of Postern's own crates with
/// the highest inclusive counts, then the `n` functions of any crate with the highest own
/// (exclusive) counts — where the work is decided, and where it is done.
fn top(out: &Path, n: usize) -> Vec<String> {
    let mut lines = vec!["Postern's functions, inclusive:".to_string()];
    lines.extend(annotated(out, true, n, |l| {
        l.contains("/crates/") || l.contains("postern_")
    }));
    lines.push("any function, exclusive:".into());
    lines.extend(annotated(out, false, n, |_| true));
    lines
}

fn annotated(out: &Path, inclusive: bool, n: usize, keep: fn(&str) -> bool) -> Vec<String> {
    let printed = Command::new("callgrind_annotate")
        .arg(format!(
            "--inclusive={}",
            if inclusive { "yes" } else { "no" }
        ))
        .arg("--threshold=100")
        .arg(out)
        .output();
    let Ok(printed) = printed else {
        return vec!["  (callgrind_annotate could not be run)".into()];
    };
    String::from_utf8_lossy(&printed.stdout)
        .lines()
        .skip_while(|l| !l.contains("file:function"))
        .skip(2)
        .filter(|l| !l.trim().is_empty() && keep(l))
        .take(n)
        .map(shortened)
        .collect()
}

/// A line of `callgrind_annotate` without the long path prefixes, cut to fit a screen.
fn shortened(line: &str) -> String {
    let mut s = line.to_string();
    for (from, to) in [("/root/.cargo/registry/src/", ""), ("/rustc/", "rustc:")] {
        while let Some(at) = s.find(from) {
            // The prefix and the next path component (the registry's or rustc's hash).
            let rest = &s[at + from.len()..];
            let skip = rest.find('/').map_or(rest.len(), |i| i + 1);
            s = format!("{}{to}{}", &s[..at], &rest[skip..]);
        }
    }
    // A workspace path (wherever the clone is) from `crates/` on.
    if let Some(at) = s.find("/crates/") {
        let start = s[..at].rfind(' ').map_or(0, |i| i + 1);
        s.replace_range(start..=at, "");
    }
    format!("  {}", s.chars().take(140).collect::<String>())
}

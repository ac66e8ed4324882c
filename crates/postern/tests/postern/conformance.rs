//! The MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
//! `tests/interop/package.json`) against a real `postern serve`, once per protocol revision:
//! every server scenario that revision requires, as the suite's `--requirements` selects them.
//!
//! The suite cannot send an `Authorization` header (it takes only `--url`), so it reaches the
//! gateway through a loopback proxy that adds the bearer token and changes nothing else.
//!
//! What fails because it tests a feature Postern does not offer (it serves tools only: no
//! resources, prompts, completions, logging, sampling, elicitation or tasks) is listed, each
//! entry with its reason, in `tests/interop/conformance/expected-failures-REVISION.yml`. The
//! runner fails on a failure it scores that is not listed and on a listed one that passes; this
//! test applies the same rule to every scenario that ran, scored or not, and checks every
//! scenario the revision requires did run. So the list always says exactly what fails.

use std::collections::BTreeMap;
use std::path::Path;

use postern_demo::target::InvoiceApi;
use serde_json::Value;

use crate::foreign::{output, repo_root, NodeClients, Proxy};
use crate::harness::{config, Dir, Served, BILLING_TOKEN};

/// The tools the suite's scenarios call by name, configured as ordinary Postern tools in front
/// of the invoice API: what the scenarios check is Postern's answer (text content; `isError` when
/// the target refuses) and that `tools/list` carries an input schema unchanged.
fn fixture_tools(target: &str) -> String {
    format!(
        r##"
[[tool]]
name = "test_simple_text"
description = "Conformance: a read-only call the invoice API answers (GET /invoices)"
class = "read_only"
http = {{ method = "GET", url = "{target}/invoices" }}

[[tool]]
name = "test_error_handling"
description = "Conformance: a read-only call the invoice API refuses (404)"
class = "read_only"
http = {{ method = "GET", url = "{target}/invoices/inv_does_not_exist" }}

[[tool]]
name = "json_schema_2020_12_tool"
description = "Tool with JSON Schema 2020-12 features"
class = "read_only"
http = {{ method = "GET", url = "{target}/invoices" }}
input_schema = {{ "$schema" = "https://json-schema.org/draft/2020-12/schema", type = "object", "$defs" = {{ address = {{ "$anchor" = "addressDef", type = "object", properties = {{ street = {{ type = "string" }}, city = {{ type = "string" }} }} }} }}, properties = {{ name = {{ type = "string" }}, address = {{ "$ref" = "#/$defs/address" }}, contactMethod = {{ type = "string", enum = ["phone", "email"] }}, phone = {{ type = "string" }}, email = {{ type = "string" }} }}, allOf = [{{ anyOf = [{{ required = ["phone"] }}, {{ required = ["email"] }}] }}], if = {{ properties = {{ contactMethod = {{ const = "phone" }} }}, required = ["contactMethod"] }}, then = {{ required = ["phone"] }}, else = {{ required = ["email"] }}, additionalProperties = false }}
"##
    )
}

/// The entries of an expected-failures file: `scenario` or `scenario:check-id`.
fn baseline_entries(path: &Path) -> Vec<(String, Option<String>)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|e| match e.trim().split_once(':') {
            Some((s, c)) => (s.to_string(), Some(c.to_string())),
            None => (e.trim().to_string(), None),
        })
        .collect()
}

/// The server scenarios `conformance list --requirements REVISION` names.
fn required(listing: &str) -> Vec<String> {
    listing
        .lines()
        .skip_while(|l| !l.starts_with("Server scenarios"))
        .skip(1)
        .take_while(|l| l.starts_with("  - "))
        .map(|l| l.trim_start_matches("  - ").trim().to_string())
        .collect()
}

/// One check of a scenario's `checks.json`.
struct Check {
    id: String,
    status: String,
    message: String,
}

/// `DIR/server-SCENARIO-TIMESTAMP/checks.json` → scenario → checks.
fn results(dir: &Path) -> BTreeMap<String, Vec<Check>> {
    let mut all = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return all;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        // server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>
        let Some(scenario) = name
            .strip_prefix("server-")
            .and_then(|n| n.get(..n.len().saturating_sub(25)))
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path().join("checks.json")) else {
            continue;
        };
        let checks: Vec<Value> = serde_json::from_str(&text).unwrap();
        let checks = checks
            .iter()
            .map(|c| Check {
                id: c["id"].as_str().unwrap_or_default().to_string(),
                status: c["status"].as_str().unwrap_or_default().to_string(),
                message: c["errorMessage"].as_str().unwrap_or_default().to_string(),
            })
            .collect();
        all.insert(scenario.to_string(), checks);
    }
    all
}

/// One line per scenario: its verdict and the checks that were not a plain success.
fn summary(results: &BTreeMap<String, Vec<Check>>) -> String {
    let mut s = String::new();
    for (scenario, checks) in results {
        let count = |st: &str| checks.iter().filter(|c| c.status == st).count();
        let verdict = match (count("FAILURE"), count("WARNING"), count("SUCCESS")) {
            (0, 0, 0) => "skip",
            (0, 0, _) => "pass",
            (0, _, _) => "warn",
            _ => "FAIL",
        };
        s.push_str(&format!(
            "{verdict} {scenario}: {} success, {} failure, {} warning, {} skipped\n",
            count("SUCCESS"),
            count("FAILURE"),
            count("WARNING"),
            count("SKIPPED"),
        ));
        for c in checks
            .iter()
            .filter(|c| matches!(c.status.as_str(), "FAILURE" | "WARNING"))
        {
            let mut message = c.message.clone();
            message.truncate(160);
            s.push_str(&format!("    {} {}: {message}\n", c.status, c.id));
        }
    }
    s
}

fn failing(c: &Check) -> bool {
    matches!(c.status.as_str(), "FAILURE" | "WARNING")
}

/// The runner's baseline rule, applied to every scenario that ran (the runner applies it only
/// to those it scores): a failing check must be listed, a listed entry must fail.
fn unexpected_and_stale(
    results: &BTreeMap<String, Vec<Check>>,
    entries: &[(String, Option<String>)],
) -> (Vec<String>, Vec<String>) {
    let mut unexpected = Vec::new();
    for (scenario, checks) in results {
        for c in checks.iter().filter(|c| failing(c)) {
            let listed = entries
                .iter()
                .any(|(s, check)| s == scenario && check.as_deref().is_none_or(|id| id == c.id));
            if !listed {
                unexpected.push(format!("{scenario}:{} {}: {}", c.id, c.status, c.message));
            }
        }
    }
    let mut stale = Vec::new();
    for (scenario, check) in entries {
        let fails = results.get(scenario).is_some_and(|checks| {
            checks
                .iter()
                .any(|c| failing(c) && check.as_deref().is_none_or(|id| id == c.id))
        });
        if !fails {
            stale.push(match check {
                Some(id) => format!("{scenario}:{id}"),
                None => scenario.clone(),
            });
        }
    }
    (unexpected, stale)
}

async fn run_suite(revision: &str) {
    let clients = NodeClients::require();
    let target = InvoiceApi::start().await.unwrap();
    let target_url = format!("http://{}", target.addr);
    let dir = Dir::new(&format!("conformance-{revision}"));
    let served = Served::start(&dir.0, &(config(&target_url) + &fixture_tools(&target_url)));
    let proxy = Proxy::start(&served.url, Some(BILLING_TOKEN)).await;
    let out_dir = dir.0.join("results");
    let baseline = repo_root().join(format!(
        "tests/interop/conformance/expected-failures-{revision}.yml"
    ));
    let entries = baseline_entries(&baseline);
    let runner = clients
        .package("@modelcontextprotocol/conformance")
        .join("dist/index.js");

    let mut list = clients.node(&runner);
    list.args(["list", "--requirements", revision]);
    let listed = output(list).await;
    let listing = String::from_utf8_lossy(&listed.stdout);
    let required = required(&listing);
    assert!(
        listed.status.success() && required.len() >= 30,
        "conformance list --requirements {revision}:\n{listing}{}",
        String::from_utf8_lossy(&listed.stderr)
    );

    let mut command = clients.node(&runner);
    command.args(["server", "--url", &proxy.url, "--requirements", revision]);
    command.arg("--expected-failures").arg(&baseline);
    command.arg("-o").arg(&out_dir);
    let out = output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let results = results(&out_dir);
    let table = summary(&results);
    println!("conformance {revision}:\n{table}");
    assert!(
        out.status.success(),
        "the conformance suite ({revision}) failed ({}): a scenario failed that \
         {} does not list, or one it lists passed\n{table}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status,
        baseline.display()
    );
    assert!(!proxy.seen().is_empty(), "no request reached the proxy");
    let missing: Vec<_> = required
        .iter()
        .filter(|s| !results.contains_key(*s))
        .collect();
    assert!(
        missing.is_empty(),
        "required scenarios without results ({revision}): {missing:?}\n{stdout}"
    );
    let (unexpected, stale) = unexpected_and_stale(&results, &entries);
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "{revision}: against {}\nfailing but not listed: {unexpected:#?}\nlisted but not failing: \
         {stale:#?}\n{table}",
        baseline.display()
    );
}

/// The 2025-11-25 wire: the `initialize` handshake and `Mcp-Session-Id` sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_2025_11_25() {
    run_suite("2025-11-25").await;
}

/// The 2026-07-28 wire: `server/discover` and stateless requests, each with its own `_meta`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_2026_07_28() {
    run_suite("2026-07-28").await;
}

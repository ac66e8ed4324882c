//! Issue 53 end to end: a real `postern serve` with `[[budget]]`s in front of the real invoice
//! API, called by rmcp's client. A call past a budget is not sent: it waits for an operator
//! (who approves it, and it is sent and counted) or, with `on_exhausted = "refuse"`, is refused
//! naming the budget, its use and when it frees up. `postern budgets`, `/ops/budgets` and
//! `/metrics` show the use.

use serde_json::json;

use crate::approvals::approval_config;
use crate::console::{full_fingerprint, ops, pay};
use crate::harness::{
    execution, execution_id, operator, operator_json, posts, Mcp, Setup, ALICE_TOKEN, BILLING_TOKEN,
};

fn budgeted(target: &str) -> String {
    format!(
        r#"{}
[[budget]]
name = "invoices"
tools = ["create_invoice"]
per = ["actor"]
window = "1h"
max_calls = 2

[[budget]]
name = "invoiced-sum"
tools = ["create_invoice"]
window = "1h"
sum = "amount"
max_sum = 1000
on_exhausted = "refuse"
"#,
        approval_config(target)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_a_budget_waits_for_a_person_or_is_refused_and_nothing_is_sent() {
    let s = Setup::start("budgets", budgeted).await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    for n in 0..2 {
        let r = mcp
            .call("create_invoice", pay(&format!("c{n}"), 100), json!({}))
            .await;
        let ex = execution(&r);
        assert_eq!(ex["state"], "completed", "{r}");
        // Little is left of `invoices` (2 per actor) after each: the answer says how much;
        // of `invoiced-sum` (1000) plenty is, and it says nothing of it.
        let left = format!(
            "little is left of budget invoices for actor=billing: {} of 2 calls left in the last 3600s",
            1 - n
        );
        let text = r["result"]["content"].to_string();
        assert!(
            text.contains(&left) && !text.contains("invoiced-sum"),
            "{r}"
        );
        assert_eq!(ex["budget_left"]["calls"], n + 1, "{r}");
    }
    assert_eq!(posts(&s.target.state), 2);
    // The third distinct call: past `invoices` (2 calls per actor), it waits for a person.
    let third = mcp.call("create_invoice", pay("c2", 100), json!({})).await;
    let ex = execution(&third);
    assert_eq!(ex["state"], "awaiting_approval", "{third}");
    let told = ex["next_step"].as_str().unwrap_or_default();
    assert!(
        told.contains(
            "budget invoices for actor=billing is used up (2 of 2 calls in the last 3600s"
        ),
        "{told}"
    );
    assert_eq!(posts(&s.target.state), 2, "nothing is sent past the budget");
    // Its identical retry is the same waiting call, not another request.
    let again = mcp.call("create_invoice", pay("c2", 100), json!({})).await;
    assert_eq!(execution_id(&again), execution_id(&third));

    // An operator approves it: it is sent, and counted.
    let id = execution_id(&third);
    let fingerprint = full_fingerprint(&s.served, &id).await;
    let path = format!("/ops/approvals/{id}/approve");
    let (status, body) = ops(
        &s.served,
        ALICE_TOKEN,
        &path,
        json!({"fingerprint": fingerprint}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..100 {
        if posts(&s.target.state) == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(posts(&s.target.state), 3, "the approved call is sent");
    let budgets = operator_json(&s.served, &["budgets"]);
    let invoices = &budgets["budgets"][0];
    assert_eq!(invoices["scopes"][0]["scope"], "actor=billing", "{budgets}");
    assert_eq!(invoices["scopes"][0]["calls"], 3, "{budgets}");

    // A sum past `invoiced-sum` (1000, refuse): refused naming it, nothing sent.
    let big = mcp.call("create_invoice", pay("big", 800), json!({})).await;
    let ex = execution(&big);
    assert_eq!(ex["state"], "rejected", "{big}");
    let told = ex["next_step"].as_str().unwrap_or_default();
    assert!(
        told.contains("budget invoiced-sum is used up (300 of 1000 summed")
            && told.contains("frees up from")
            && told.contains("Nothing was sent"),
        "{told}"
    );
    assert_eq!(posts(&s.target.state), 3);

    // The operator's view, in words, and the gauges.
    let (code, out, err) = operator(&s.served, &["budgets"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("invoices: at most 2 calls per 3600s of create_invoice (past it: approval)"),
        "{out}"
    );
    assert!(
        out.contains("actor=billing: 3 calls, 150% used")
            && out.contains("all calls: 3 calls, 300 summed, 30% used"),
        "{out}"
    );
    let metrics = crate::harness::metrics(&crate::console::base(&s.served)).await;
    assert!(
        metrics.contains(r#"postern_budget_calls{budget="invoices",scope="actor=billing"} 3"#),
        "{metrics}"
    );

    // The console's page.
    let (session, _) = crate::console::forms::session_of(&s.served, ALICE_TOKEN).await;
    let page = crate::harness::http_builder()
        .build()
        .unwrap()
        .get(format!("{}/ui/budgets", crate::console::base(&s.served)))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.unwrap();
    for shown in [
        "<h2>invoices</h2>",
        "<strong>2 calls</strong>",
        "actor=billing",
        "3 of 2",
        "150%",
        "300 of 1000",
        "<strong>refuse</strong>",
    ] {
        assert!(html.contains(shown), "{shown} in\n{html}");
    }
}

fn partitioned(target: &str) -> String {
    partitioned_at_most(target, 1)
}

fn partitioned_at_most(target: &str, max_calls: u64) -> String {
    format!(
        r#"{}
[[tool]]
name = "create_invoice_in"
description = "Create an invoice in one currency"
class = "idempotent_write"
match_window = "10m"
input_schema = {{ type = "object", required = ["customer", "amount", "currency"], properties = {{ customer = {{ type = "string" }}, amount = {{ type = "integer" }}, currency = {{ type = "string", enum = ["EUR", "USD"] }} }} }}
http = {{ method = "POST", url = "{target}/invoices", response_timeout = "1s" }}

[[budget]]
name = "per-currency"
tools = ["create_invoice_in"]
per = ["currency"]
window = "1h"
max_calls = {max_calls}
on_exhausted = "refuse"
"#,
        crate::harness::config(target)
    )
}

/// The attack the `enum` rule stops: an agent that invents a new value of the argument a
/// budget is partitioned by, to start a count of its own for each call. Every value it may
/// send is one the config lists (a free-text argument is refused at start-up), so an invented
/// one is refused with nothing sent and nothing counted. Restarted with a raised limit, the
/// gateway keeps the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_inventing_partition_values_does_not_escape_a_budget() {
    let s = Setup::start("budget-partition", partitioned).await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let invoice = |customer: &str, currency: &str| json!({"customer": customer, "amount": 10, "currency": currency});
    let first = mcp
        .call("create_invoice_in", invoice("a", "EUR"), json!({}))
        .await;
    assert_eq!(execution(&first)["state"], "completed", "{first}");
    let past = mcp
        .call("create_invoice_in", invoice("b", "EUR"), json!({}))
        .await;
    assert_eq!(execution(&past)["state"], "rejected", "{past}");
    for (n, invented) in ["EUR ", "eur", "EUR-2", "XEU1"].iter().enumerate() {
        let r = mcp
            .call(
                "create_invoice_in",
                invoice(&format!("x{n}"), invented),
                json!({}),
            )
            .await;
        assert_ne!(execution(&r)["state"], "completed", "{invented:?}: {r}");
        assert!(
            r.to_string().contains("currency"),
            "the refusal names the argument: {r}"
        );
    }
    assert_eq!(
        posts(&s.target.state),
        1,
        "no invented value got a call through"
    );
    // The other listed value is a scope of its own, as the config says.
    let usd = mcp
        .call("create_invoice_in", invoice("c", "USD"), json!({}))
        .await;
    assert_eq!(execution(&usd)["state"], "completed", "{usd}");
    assert_eq!(posts(&s.target.state), 2);

    // A config change keeps the counts: restarted with a limit of 2, each currency has one
    // call left, not two.
    let Setup {
        target,
        dir,
        served,
    } = s;
    served.stop();
    let raised = partitioned_at_most(&format!("http://{}", target.addr), 2);
    std::fs::write(dir.0.join("postern.toml"), raised).unwrap();
    let served = crate::harness::Served::spawn(&dir.0, "127.0.0.1:0");
    let mcp = Mcp::connect(&served.url, BILLING_TOKEN).await;
    for (customer, currency, state) in [
        ("d", "EUR", "completed"),
        ("e", "EUR", "rejected"),
        ("f", "USD", "completed"),
        ("g", "USD", "rejected"),
    ] {
        let r = mcp
            .call("create_invoice_in", invoice(customer, currency), json!({}))
            .await;
        assert_eq!(
            execution(&r)["state"],
            state,
            "{customer} in {currency}: {r}"
        );
    }
    assert_eq!(posts(&target.state), 4);
}

/// What `postern serve` says refusing the base config with `budget` (a `[[budget]]`'s keys).
fn start_up_error(tag: &str, budget: &str) -> String {
    let dir = crate::harness::Dir::new(tag);
    let config = format!(
        "{}\n[[budget]]\n{budget}\n",
        crate::harness::config("http://127.0.0.1:9")
    );
    crate::harness::prepare(&dir.0, &config);
    crate::harness::serve_refuses(&dir.0)
}

#[test]
fn a_budget_partitioned_by_a_free_text_argument_is_refused_at_start_up() {
    let err = start_up_error(
        "budget-free-text",
        r#"name = "per-customer"
tools = ["create_invoice"]
per = ["customer"]
window = "1h"
max_calls = 1
on_exhausted = "refuse""#,
    );
    assert!(
        err.contains("budget \"per-customer\": per: argument \"customer\" of tool \"create_invoice\" may take any value"),
        "{err}"
    );
}

#[test]
fn a_budget_waiting_for_approvals_with_no_operator_is_refused_at_start_up() {
    let err = start_up_error(
        "budget-no-operator",
        r#"name = "b"
tools = ["create_invoice"]
window = "1h"
max_calls = 1"#,
    );
    assert!(
        err.contains("budget \"b\": on_exhausted = \"approval\""),
        "{err}"
    );
}

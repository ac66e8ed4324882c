//! The operator console (issue 18) in a real headless Chromium (Debian's `chromium` driven by
//! `chromedriver` over WebDriver) against a real `postern serve` and the real invoice API:
//! live approvals, approve and deny, who decided, two operators at once, session
//! authorization, review resolution, the timeline of a lost answer, an agent's `<img onerror>`
//! rendered as text, forged and expired form posts. Screenshots go to
//! `target/ui-screenshots/`.
//!
//! URL-mode elicitation is in `console/elicit.rs`, the webhooks in `console/webhook.rs`, the
//! security review's findings (Host, `next`, expiry, log-in nonce) in `console/hardening.rs`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use postern_testkit::browser::Browser;
use serde_json::{json, Value};

use crate::approvals::approval_config;
use crate::harness::{
    execution, execution_id, http_builder, posts, Mcp, Served, Setup, ALICE_TOKEN, BILLING_TOKEN,
};

mod elicit;
pub mod forms;
mod hardening;
mod hidden_text;
mod webhook;

pub const BOB_TOKEN: &str = "bob-operator-token-0123456789ab";

/// The approvals config with a second operator (bob) and an actor whose runs need authorizing.
pub fn console_config(target: &str) -> String {
    format!(
        r#"{}
[[operator]]
name = "bob"
token = {{ file = "bob.token" }}

[[actor]]
name = "intern"
token = {{ file = "intern.token" }}
session_approval = "required"
"#,
        approval_config(target)
    )
}

pub const INTERN_TOKEN: &str = "intern-token-0123456789abcdef";

pub async fn setup(tag: &str) -> Setup {
    setup_with(tag, console_config).await
}

pub async fn setup_with(tag: &str, make: impl FnOnce(&str) -> String) -> Setup {
    setup_with_files(tag, &[], make).await
}

/// [`setup_with`], with extra private files written first (a webhook's secret).
pub async fn setup_with_files(
    tag: &str,
    files: &[(&str, &str)],
    make: impl FnOnce(&str) -> String,
) -> Setup {
    let dir = crate::harness::Dir::new(tag);
    for (name, text) in files {
        crate::harness::write_private(&dir.0.join(name), text);
    }
    crate::harness::write_private(&dir.0.join("bob.token"), BOB_TOKEN);
    crate::harness::write_private(&dir.0.join("intern.token"), INTERN_TOKEN);
    crate::harness::write_private(&dir.0.join("alice.token"), ALICE_TOKEN);
    let target = postern_demo::target::InvoiceApi::start().await.unwrap();
    let served = Served::start(&dir.0, &make(&format!("http://{}", target.addr)));
    Setup {
        target,
        dir,
        served,
    }
}

/// The gateway's base URL (`http://127.0.0.1:PORT`).
pub fn base(served: &Served) -> String {
    served.url.trim_end_matches("/mcp").to_string()
}

/// Where the screenshots go: the workspace's `target/ui-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    std::fs::write(screenshot_dir().join(name), png).unwrap();
}

/// Logs in through the page's form.
pub async fn log_in(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/ui/approvals")).await.unwrap();
    assert!(
        c.current_url()
            .await
            .unwrap()
            .path()
            .starts_with("/ui/login"),
        "an anonymous visitor is sent to the log-in page"
    );
    c.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    c.find(Locator::Css("section.login button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(c, "the Approvals page after log-in", "h1", |t| {
        t.starts_with("Approvals")
    })
    .await;
}

/// Waits until the first element matching `css` has text satisfying `ok`.
pub async fn wait_for(c: &Client, what: &str, css: &str, ok: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < Duration::from_secs(10) {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            if let Ok(t) = e.text().await {
                if ok(&t) {
                    return t;
                }
                last = t;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let page = c.source().await.unwrap_or_default();
    let url = c
        .current_url()
        .await
        .map(|u| u.to_string())
        .unwrap_or_default();
    panic!("{what}: {css} never matched; last text {last:?}; at {url}:\n{page}");
}

pub async fn text(c: &Client, css: &str) -> String {
    // The live page may swap the rows between finding and reading: found again then.
    let mut last = None;
    for _ in 0..20 {
        match c.find(Locator::Css(css)).await {
            Ok(e) => match e.text().await {
                Ok(t) => return t,
                Err(err) => last = Some(err.to_string()),
            },
            Err(err) => last = Some(err.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{css}: {last:?}");
}

pub async fn click(c: &Client, css: &str) {
    let mut last = None;
    for _ in 0..20 {
        match c.find(Locator::Css(css)).await {
            Ok(e) => match e.click().await {
                Ok(()) => return,
                Err(err) => last = Some(err.to_string()),
            },
            Err(err) => last = Some(err.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{css}: {last:?}");
}

/// Types into the first element matching `css`, found again if the live page swapped it
/// before the keys went in (the page keeps what was typed across its own swaps).
pub async fn type_into(c: &Client, css: &str, text: &str) {
    let mut last = None;
    for _ in 0..20 {
        match c.find(Locator::Css(css)).await {
            Ok(e) => match e.send_keys(text).await {
                Ok(()) => return,
                Err(err) => last = Some(err.to_string()),
            },
            Err(err) => last = Some(err.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{css}: {last:?}");
}

pub fn pay(customer: &str, amount: i64) -> Value {
    json!({"customer": customer, "amount": amount})
}

/// A JSON call of the operator API.
pub async fn ops(served: &Served, token: &str, path: &str, body: Value) -> (u16, Value) {
    let r = http_builder()
        .build()
        .unwrap()
        .post(format!("{}{path}", base(served)))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The full fingerprint an approval names (the agent's result shows only its first digits).
pub async fn full_fingerprint(served: &Served, id: &str) -> String {
    let r = http_builder()
        .build()
        .unwrap()
        .get(format!("{}/ops/approvals/{id}", base(served)))
        .bearer_auth(ALICE_TOKEN)
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    v["fingerprint"].as_str().unwrap().to_string()
}

/// Acceptance 1 and 3: a call to an `every_call` tool appears within a second without a
/// reload, its `<img onerror>` argument as text; Approve sends exactly one request, the agent's
/// call returns completed, the row says who approved. Then Deny, and two operators at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_arrive_live_and_are_decided_in_the_browser() {
    let s = setup("ui-approvals").await;
    let base = base(&s.served);
    let browser = Browser::start().await;
    let c = &browser.client;
    log_in(c, &base, ALICE_TOKEN).await;
    assert!(text(c, "#approval-rows").await.contains("Nothing waits"));
    assert_eq!(text(c, "form.logout .who strong").await, "alice");

    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let hostile = "<img src=x onerror=alert(1)>";
    let first = mcp.call("pay_invoice", pay(hostile, 7), json!({})).await;
    let answered = Instant::now();
    assert_eq!(execution(&first)["state"], "awaiting_approval", "{first}");
    let id = execution_id(&first);
    let row = format!("#row-{id}");
    wait_for(c, "the request on the open page", &row, |t| {
        t.contains("pay_invoice")
    })
    .await;
    let live = answered.elapsed();
    assert!(
        live < Duration::from_secs(1),
        "appeared after {live:?}, without a reload"
    );

    // The argument is text: shown verbatim, no <img> element, no dialog.
    let record = text(c, &format!("{row} pre.record")).await;
    assert!(record.contains(hostile), "{record}");
    assert!(c
        .find_all(Locator::Css("#approval-rows img"))
        .await
        .unwrap()
        .is_empty());
    assert!(c.get_alert_text().await.is_err(), "no alert() ran");
    let count = text(c, "#pending-count").await;
    assert_eq!(count, "1 pending");
    screenshot(c, "approvals.png").await;

    assert_eq!(
        posts(&s.target.state),
        0,
        "nothing sent before the approval"
    );
    click(c, &format!("{row} form.approve button")).await;
    let by = wait_for(c, "the decided panel", "#decided .by", |t| !t.is_empty()).await;
    assert_eq!(by, "alice");
    assert!(text(c, "#decided .decision")
        .await
        .starts_with("approved by alice at"));
    let state = s.target.state.clone();
    crate::harness::eventually("the approved call is sent", || posts(&state) == 1).await;
    let done = mcp.call("pay_invoice", pay(hostile, 7), json!({})).await;
    assert_eq!(execution_id(&done), id);
    assert_eq!(execution(&done)["state"], "completed", "{done}");
    assert_eq!(posts(&s.target.state), 1);

    // Deny, with a reason.
    let second = mcp.call("pay_invoice", pay("deny-co", 8), json!({})).await;
    let denied_id = execution_id(&second);
    let row = format!("#row-{denied_id}");
    wait_for(c, "the second request", &row, |t| t.contains("deny-co")).await;
    type_into(
        c,
        &format!("{row} form.deny input[name=reason]"),
        "not this vendor",
    )
    .await;
    click(c, &format!("{row} form.deny button")).await;
    let decision = wait_for(c, "the denial", "#decided .decision", |t| {
        t.contains("denied")
    })
    .await;
    assert!(
        decision.contains("denied by alice") && decision.contains("not this vendor"),
        "{decision}"
    );
    let after = mcp.call("pay_invoice", pay("deny-co", 8), json!({})).await;
    assert_eq!(execution(&after)["state"], "denied", "{after}");
    assert_eq!(posts(&s.target.state), 1, "a denied call is never sent");

    // Two operators at once: bob approves through the API while alice has the page open;
    // alice's click is not applied and her page says who decided, and when.
    let third = mcp.call("pay_invoice", pay("race-co", 9), json!({})).await;
    let race = execution_id(&third);
    c.goto(&format!("{base}/ui/approvals/{race}"))
        .await
        .unwrap();
    let fingerprint = full_fingerprint(&s.served, &race).await;
    let (status, _) = ops(
        &s.served,
        BOB_TOKEN,
        &format!("/ops/approvals/{race}/approve"),
        json!({"fingerprint": fingerprint}),
    )
    .await;
    assert_eq!(status, 200);
    click(c, "#decide form.approve button").await;
    let said = wait_for(c, "the conflict", "section.message p", |t| {
        t.contains("Already")
    })
    .await;
    assert!(said.starts_with("Already approved by bob at 20"), "{said}");
    crate::harness::eventually("one request for the raced call", || posts(&state) == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        posts(&s.target.state),
        2,
        "exactly one request for the raced call"
    );
    browser.close().await;
}

/// Acceptance 2 and 5: session authorization, review resolution, and the timeline of a lost
/// answer (completed → delivery_failed → delivered, the retry answered from the record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_reviews_and_the_timeline_in_the_browser() {
    use postern_demo::target::Mode;
    let s = setup("ui-runs").await;
    let base = base(&s.served);
    let browser = Browser::start().await;
    let c = &browser.client;
    log_in(c, &base, ALICE_TOKEN).await;

    // A run that needs authorizing: its call waits, the Runs page authorizes it, it is sent.
    let intern = Mcp::connect(&s.served.url, INTERN_TOKEN).await;
    let waiting = intern
        .call("create_invoice", pay("intern-co", 3), json!({}))
        .await;
    assert_eq!(
        execution(&waiting)["state"],
        "awaiting_approval",
        "{waiting}"
    );
    let run = intern.run_id();
    c.goto(&format!("{base}/ui/runs")).await.unwrap();
    let row = format!("tr[id='run-{run}']");
    assert!(text(c, &format!("{row} td.authorization"))
        .await
        .starts_with("pending"));
    click(c, &format!("{row} form button.approve")).await;
    let auth = wait_for(
        c,
        "the authorization",
        &format!("{row} td.authorization"),
        |t| t.starts_with("authorized"),
    )
    .await;
    assert!(auth.contains("by alice"), "{auth}");
    crate::harness::eventually("the waiting call is sent", || posts(&s.target.state) == 1).await;

    // A review: an irreversible call whose answer never came.
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    s.target.state.set_mode(Mode::HangOnce);
    let first = mcp.call("send_wire", pay("wire-co", 500), json!({})).await;
    assert_eq!(execution(&first)["state"], "outcome_unknown", "{first}");
    let wire = execution_id(&first);
    let review = mcp.call("send_wire", pay("wire-co", 500), json!({})).await;
    assert_eq!(execution(&review)["state"], "needs_review", "{review}");
    c.goto(&format!("{base}/ui/reviews")).await.unwrap();
    let article = format!("#review-{wire}");
    click(c, &format!("{article} input[value=applied]")).await;
    c.find(Locator::Css(&format!("{article} input[name=reason]")))
        .await
        .unwrap()
        .send_keys("invoice 2 exists in the billing UI")
        .await
        .unwrap();
    click(c, &format!("{article} form.resolve button")).await;
    let resolved = wait_for(c, "the resolution", "#decided .decision", |t| {
        t.contains("resolved")
    })
    .await;
    assert!(
        resolved.starts_with("resolved applied by alice"),
        "{resolved}"
    );
    let told = mcp.call("send_wire", pay("wire-co", 500), json!({})).await;
    assert_eq!(execution(&told)["state"], "resolved", "{told}");
    assert_eq!(execution(&told)["outcome"], "applied", "{told}");

    // A lost answer: the client cuts its connection while the target works; its retry is
    // answered from the record.
    s.target
        .state
        .set_mode(Mode::SlowOnce(Duration::from_millis(800)));
    let req = mcp.request("create_invoice", pay("lost-co", 11), json!({}));
    assert!(mcp
        .raw(&req, Some(Duration::from_millis(300)))
        .await
        .is_err());
    let state = s.target.state.clone();
    crate::harness::eventually("the lost call reaches the target", || posts(&state) == 3).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let again = mcp
        .call("create_invoice", pay("lost-co", 11), json!({}))
        .await;
    assert_eq!(execution(&again)["attempt"], "recovered", "{again}");
    let lost = execution_id(&again);
    let url = format!("{base}/ui/executions/{lost}");
    let mut kinds = Vec::new();
    for _ in 0..100 {
        c.goto(&url).await.unwrap();
        kinds = event_kinds(c).await;
        if kinds.iter().any(|k| k == "delivered") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| x.starts_with(k))
            .unwrap_or_else(|| panic!("{k} in {kinds:?}"))
    };
    assert!(
        at("completed") < at("delivery_failed") && at("delivery_failed") < at("delivered"),
        "{kinds:?}"
    );
    let answers = text(c, "#answers").await;
    assert!(
        answers.contains("answered from its record"),
        "the retry answered from the record, in words: {answers}"
    );
    assert!(
        answers.contains("Yes:"),
        "the lost delivery in words: {answers}"
    );
    screenshot(c, "timeline.png").await;
    browser.close().await;
}

async fn event_kinds(c: &Client) -> Vec<String> {
    let mut out = Vec::new();
    for e in c
        .find_all(Locator::Css("ol.timeline li .kind"))
        .await
        .unwrap()
    {
        out.push(e.text().await.unwrap());
    }
    out
}

//! Issue 49, point 3: what an agent writes is shown as it is, never reordered or hidden. An
//! argument `"\u202e1234-5678-90\u202c"` read `09-8765-4321` on the approval page; zero-width
//! and C1 characters were there raw. In a real Chromium against a real `postern serve`.

use fantoccini::Locator;
use postern_testkit::browser::Browser;
use serde_json::json;

use super::{base, log_in, setup, wait_for};
use crate::harness::{execution, execution_id, Mcp, ALICE_TOKEN, BILLING_TOKEN};

/// Characters that change what a person reads: none may reach the page raw.
fn hides(text: &str) -> Option<char> {
    text.chars()
        .find(|&c| c != '\n' && postern_core::terminal_text::acts_on_terminal(c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidi_zero_width_and_c1_characters_are_shown_escaped_in_the_console() {
    let s = setup("ui-hidden-text").await;
    let base = base(&s.served);
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let args = json!({"customer": "\u{202e}1234-5678-90\u{202c}", "amount": 5,
        "trace_id": "t\u{200b}r\u{9b}31m\u{2066}x"});
    let first = mcp.call("pay_traced", args, json!({})).await;
    assert_eq!(execution(&first)["state"], "awaiting_approval", "{first}");
    let id = execution_id(&first);

    let browser = Browser::start().await;
    let c = &browser.client;
    log_in(c, &base, ALICE_TOKEN).await;
    let row = format!("#row-{id} pre.record");
    let listed = wait_for(c, "the request's row", &row, |t| t.contains("customer")).await;
    c.goto(&format!("{base}/ui/approvals/{id}")).await.unwrap();
    wait_for(c, "the request's page", "h1", |t| t.starts_with("Approval")).await;
    let mut shown = vec![listed];
    for e in c.find_all(Locator::Css("pre.record")).await.unwrap() {
        shown.push(e.text().await.unwrap());
    }
    // The record that will be sent, the target, the arguments: the record and the arguments
    // both hold the customer, the arguments the trace id.
    assert_eq!(shown.len(), 4, "{shown:?}");
    for text in [&shown[0], &shown[1], &shown[3]] {
        assert!(text.contains(r"\u202e1234-5678-90\u202c"), "{text}");
        assert_eq!(hides(text), None, "{text:?}");
        assert!(!text.contains("09-8765-4321"), "{text}");
    }
    assert!(
        shown[3].contains(r"t\u200br\u009b31m\u2066x"),
        "{}",
        shown[3]
    );
    let whole = c.find(Locator::Css("main")).await.unwrap().text().await;
    assert_eq!(hides(&whole.unwrap()), None);
    browser.close().await;
}

//! Acceptance 8: an approval request is POSTed to a local receiver, signed; the receiver's
//! verification helper accepts it once and refuses the replay; a webhook that is down is
//! retried and then shown failed on the Approvals page (and nothing is approved).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use postern_console::SignatureCheck;
use serde_json::{json, Value};

use super::forms::session_of;
use super::{base, console_config, pay};
use crate::harness::{execution_id, http_builder, posts, Mcp, ALICE_TOKEN, BILLING_TOKEN};

const SECRET: &str = "webhook-secret-0123456789abcdef";

type Received = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push((headers, body.to_vec()));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), got)
}

fn header(h: &HeaderMap, name: &str) -> String {
    h.get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_requests_are_signed_retried_and_failures_shown() {
    let (hook, received) = receiver().await;
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/down", l.local_addr().unwrap())
    };
    let make = |target: &str| {
        format!(
            "{}\n[[approver.webhook]]\nurl = \"{hook}\"\nsecret = {{ file = \"hook.secret\" }}\n\n[[approver.webhook]]\nurl = \"{down}\"\nsecret = {{ file = \"hook.secret\" }}\n",
            console_config(target)
        )
    };
    let s = super::setup_with_files("ui-webhook", &[("hook.secret", SECRET)], make).await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let call = mcp.call("pay_invoice", pay("hook-co", 12), json!({})).await;
    let id = execution_id(&call);

    let mut waited = 0;
    while received.lock().unwrap().is_empty() && waited < 100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    let (headers, body) = received.lock().unwrap()[0].clone();
    let sent: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(sent["type"], "approval_requested");
    assert_eq!(sent["approval_id"], id.as_str());
    assert_eq!(sent["record"]["arguments"]["customer"], "hook-co");
    // The request as it will be sent, every argument (issue 33: the approver sees it all).
    assert_eq!(
        sent["request"]["arguments"]["customer"], "hook-co",
        "{sent}"
    );
    assert!(sent["request"]["target"].is_object(), "{sent}");
    let page = format!("{}/ui/approvals/{id}", base(&s.served));
    assert_eq!(sent["page_url"], page.as_str());
    assert!(sent["approve_url"].as_str().unwrap().starts_with(&page));

    // The receiver's check: accepted once, refused when replayed, refused when changed.
    let check = SignatureCheck::new(SECRET.as_bytes(), Duration::from_secs(300));
    let (sig, t, delivery) = (
        header(&headers, "postern-signature"),
        header(&headers, "postern-timestamp"),
        header(&headers, "postern-delivery"),
    );
    let now = postern_pipeline::now().0 / 1000;
    check
        .verify(&sig, &t, &delivery, &body, now)
        .expect("a correctly signed request");
    let replay = check.verify(&sig, &t, &delivery, &body, now).unwrap_err();
    assert!(replay.to_string().contains("replay"), "{replay}");
    let fresh = SignatureCheck::new(SECRET.as_bytes(), Duration::from_secs(300));
    assert!(fresh
        .verify(&sig, &t, &delivery, b"{\"type\":\"approved\"}", now)
        .is_err());
    assert!(
        fresh
            .verify(&sig, &t, &delivery, &body, now + 3600)
            .is_err(),
        "outside the window"
    );

    // The webhook that is down: retried, then shown failed on the page; nothing approved.
    let (session, _) = session_of(&s.served, ALICE_TOKEN).await;
    let http = http_builder().build().unwrap();
    let mut shown = String::new();
    for _ in 0..100 {
        shown = http
            .get(format!("{}/ui/approvals", base(&s.served)))
            .header("cookie", &session)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if shown.contains("webhook failed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(shown.contains("webhook failed"), "{shown}");
    assert!(
        shown.contains("FAILED after 5 attempts"),
        "the failure says how it failed"
    );
    assert_eq!(posts(&s.target.state), 0, "a delivery never approves");
    assert_eq!(
        received.lock().unwrap().len(),
        1,
        "delivered once, not retried after success"
    );
}

//! The security review's findings on the console (issue 33, point 8), each against a real
//! `postern serve` over plain HTTP: a foreign `Host` is refused as on `/mcp`, a control
//! character in the log-in's `next` is no 500 and no redirect out of `/ui`, a decision after
//! the request expired is 410 Gone, and an empty log-in nonce proves nothing.

use std::time::Duration;

use serde_json::json;

use super::forms::{cookie, hidden, session_of};
use super::{base, full_fingerprint, ops, pay, setup};
use crate::harness::{execution_id, http_builder, posts, Mcp, ALICE_TOKEN, BILLING_TOKEN};

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The log-in page's nonce cookie and its form's nonce (the same value).
async fn login_nonce(http: &reqwest::Client, base: &str) -> String {
    let page = http.get(format!("{base}/ui/login")).send().await.unwrap();
    let set = cookie(&page, "postern_login");
    let nonce = hidden(&page.text().await.unwrap(), "login_nonce");
    assert_eq!(set, nonce);
    nonce
}

/// What `/mcp` answers an `initialize` that names `host`: (status, body).
async fn mcp_with_host(http: &reqwest::Client, url: &str, host: &str) -> (u16, String) {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "rebinding", "version": "1"}}});
    let r = http
        .post(url)
        .bearer_auth(BILLING_TOKEN)
        .header("host", host)
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Finding 1: a rebound name (`Host: evil.example`) reaches neither `/mcp` nor `/ui`; the
/// console refuses it exactly as `/mcp` does, before its log-in or its form checks (which
/// trust `Host`: a forged `Host` with a matching `Origin` would pass the `Origin` check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_is_refused_on_the_console_as_on_mcp() {
    let s = setup("ui-host").await;
    let (base, http) = (base(&s.served), client());
    let port = s.served.addr().rsplit_once(':').unwrap().1.to_string();
    let evil = format!("evil.example:{port}");
    let (mcp_status, mcp_text) = mcp_with_host(&http, &s.served.url, &evil).await;
    assert_eq!(mcp_status, 403, "{mcp_text}");

    for path in [
        "/ui",
        "/ui/login",
        "/ui/approvals",
        "/ui/assets/console.css",
    ] {
        let r = http
            .get(format!("{base}{path}"))
            .header("host", &evil)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), mcp_status, "{path}");
        assert_eq!(
            r.text().await.unwrap(),
            mcp_text,
            "{path}: the same refusal"
        );
    }

    // A logged-in operator's own form, replayed through the rebound name (its Origin matches
    // the forged Host): refused, nothing decided.
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let id = execution_id(
        &mcp.call("pay_invoice", pay("rebind-co", 3), json!({}))
            .await,
    );
    let fingerprint = full_fingerprint(&s.served, &id).await;
    let (session, csrf) = session_of(&s.served, ALICE_TOKEN).await;
    let r = http
        .post(format!("{base}/ui/approvals/{id}/approve"))
        .header("host", &evil)
        .header("origin", format!("http://{evil}"))
        .header("cookie", &session)
        .form(&[("fingerprint", fingerprint.as_str()), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("Host header is not allowed"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(posts(&s.target.state), 0, "nothing was approved or sent");

    // The loopback names still reach it.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let r = http
            .get(format!("{base}/ui/login"))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{host}");
    }
}

/// Finding 2: a CR LF (or any control character) in `next` neither breaks the redirect (a 500)
/// nor leaves `/ui`: the log-in goes to the default landing page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_character_in_next_lands_on_the_default_page() {
    let s = setup("ui-next").await;
    let (base, http) = (base(&s.served), client());
    let nonce = login_nonce(&http, &base).await;
    for next in [
        "/ui/runs\r\nSet-Cookie: planted=1",
        "/ui/runs\nLocation: https://evil.example/",
        "/ui/\0",
        "/ui/\u{7f}",
        "/uievil",
    ] {
        let r = http
            .post(format!("{base}/ui/login"))
            .header("cookie", format!("postern_login={nonce}"))
            .form(&[
                ("token", ALICE_TOKEN),
                ("login_nonce", &nonce),
                ("next", next),
            ])
            .send()
            .await
            .unwrap_or_else(|e| panic!("{next:?}: the log-in failed: {e}"));
        assert_eq!(r.status().as_u16(), 303, "{next:?}");
        assert_eq!(r.headers()["location"], "/ui/approvals", "{next:?}");
        let planted = r.headers().get_all("set-cookie").iter();
        assert!(
            planted
                .filter_map(|v| v.to_str().ok())
                .all(|v| !v.contains("planted")),
            "{next:?}"
        );
    }
    // The log-in page itself takes it as text, and its form carries the default.
    let r = http
        .get(format!("{base}/ui/login?next=%2Fui%2Fruns%0D%0AX%3A%201"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(hidden(&r.text().await.unwrap(), "next"), "/ui/approvals");
}

/// Finding 3: a decision on a request that expired is 410 Gone (docs/operators.md: "410 an expired
/// request"), also after the expiry sweep has recorded it denied, on the console as on `/ops`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_after_expiry_is_gone() {
    let s = setup("ui-expired").await;
    let (base, http) = (base(&s.served), client());
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let id = execution_id(&mcp.call("pay_quickly", pay("late-co", 2), json!({})).await);
    let fingerprint = full_fingerprint(&s.served, &id).await;
    // `approval_ttl = "1s"`, and the sweep records the expiry every second.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (session, csrf) = session_of(&s.served, ALICE_TOKEN).await;
    for action in ["approve", "deny"] {
        let r = http
            .post(format!("{base}/ui/approvals/{id}/{action}"))
            .header("cookie", &session)
            .form(&[("fingerprint", fingerprint.as_str()), ("csrf", &csrf)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 410, "console {action}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains("expired") && text.contains("not applied"),
            "{text}"
        );
        let body = match action {
            "approve" => json!({"fingerprint": fingerprint}),
            _ => json!({}),
        };
        let path = format!("/ops/approvals/{id}/{action}");
        let (status, said) = ops(&s.served, ALICE_TOKEN, &path, body).await;
        assert_eq!(status, 410, "/ops {action}: {said}");
    }
    assert_eq!(posts(&s.target.state), 0, "nothing expired was sent");
}

/// Finding 4: an empty `login_nonce` with an empty (cleared) cookie is no proof that the form
/// came from this console: refused like any other mismatch, no session issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_login_nonce_is_refused() {
    let s = setup("ui-nonce").await;
    let (base, http) = (base(&s.served), client());
    for cookie_header in [Some("postern_login="), None] {
        let mut post = http.post(format!("{base}/ui/login"));
        if let Some(c) = cookie_header {
            post = post.header("cookie", c);
        }
        let form = [("token", ALICE_TOKEN), ("login_nonce", ""), ("next", "/ui")];
        let r = post.form(&form).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 403, "{cookie_header:?}");
        let session = r.headers().get_all("set-cookie").iter();
        assert!(
            session
                .filter_map(|v| v.to_str().ok())
                .all(|v| !v.starts_with("postern_session=")),
            "no session for {cookie_header:?}"
        );
    }
}

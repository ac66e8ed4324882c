//! Acceptance 4 and the bad-input rules: a cross-site form post, a post without (or with a
//! stale) CSRF token, an expired session, an actor's token at the log-in, and the headers.

use std::time::Duration;

use fantoccini::Locator;
use postern_testkit::browser::Browser;
use serde_json::json;

use super::{base, click, log_in, pay, setup, setup_with, text, wait_for};
use crate::harness::{
    execution, execution_id, http_builder, posts, Mcp, Served, ALICE_TOKEN, BILLING_TOKEN,
};

/// A console session for a plain HTTP client: (cookie header, CSRF token of its forms).
pub async fn session_of(served: &Served, token: &str) -> (String, String) {
    let http = http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = base(served);
    let page = http.get(format!("{base}/ui/login")).send().await.unwrap();
    let login_cookie = cookie(&page, "postern_login");
    let html = page.text().await.unwrap();
    let nonce = hidden(&html, "login_nonce");
    let r = http
        .post(format!("{base}/ui/login"))
        .header("cookie", format!("postern_login={login_cookie}"))
        .form(&[
            ("token", token),
            ("login_nonce", nonce.as_str()),
            ("next", "/ui/approvals"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "logged in");
    let session = format!("postern_session={}", cookie(&r, "postern_session"));
    let page = http
        .get(format!("{base}/ui/approvals"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let csrf = hidden(&page.text().await.unwrap(), "csrf");
    (session, csrf)
}

pub fn cookie(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            v.strip_prefix(&format!("{name}="))
                .map(|rest| rest.split(';').next().unwrap_or("").to_string())
        })
        .unwrap_or_else(|| panic!("no {name} cookie"))
}

pub fn hidden(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} field"));
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_stale_and_cross_site_posts_decide_nothing() {
    let s = setup("ui-forms").await;
    let base = base(&s.served);
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let call = mcp.call("pay_invoice", pay("forge-co", 4), json!({})).await;
    let id = execution_id(&call);
    let fingerprint = super::full_fingerprint(&s.served, &id).await;
    let approve = format!("{base}/ui/approvals/{id}/approve");
    let http = http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // No session at all: to the log-in page, nothing decided.
    let r = http
        .post(&approve)
        .form(&[("fingerprint", fingerprint.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert!(r.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("/ui/login"));

    let (session, csrf) = session_of(&s.served, ALICE_TOKEN).await;
    // A valid session but no CSRF token, and another session's token: 403.
    let (_, stale) = session_of(&s.served, ALICE_TOKEN).await;
    assert_ne!(stale, csrf);
    for token in [None, Some(stale.as_str()), Some("")] {
        let mut form = vec![("fingerprint", fingerprint.as_str())];
        if let Some(t) = token {
            form.push(("csrf", t));
        }
        let r = http
            .post(&approve)
            .header("cookie", &session)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403, "csrf {token:?}");
        assert!(r.text().await.unwrap().contains("Nothing was decided"));
    }
    // The right token but a foreign Origin: 403.
    let r = http
        .post(&approve)
        .header("cookie", &session)
        .header("origin", "http://evil.example")
        .form(&[
            ("fingerprint", fingerprint.as_str()),
            ("csrf", csrf.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(posts(&s.target.state), 0);
    let pending = crate::harness::operator_json(&s.served, &["approvals", "list"]);
    assert_eq!(
        pending["approvals"][0]["state"], "awaiting_approval",
        "{pending}"
    );

    // The same in the browser: a page on another origin posts a form to the console while the
    // operator is logged in. Refused; nothing sent.
    let site = cross_site_page(&approve, &fingerprint).await;
    let browser = Browser::start().await;
    let c = &browser.client;
    log_in(c, &base, ALICE_TOKEN).await;
    c.goto(&site).await.unwrap();
    click(c, "#go").await;
    let said = wait_for(c, "the refusal", "h1", |t| t.starts_with("Refused")).await;
    assert!(said.contains("not sent from the console"), "{said}");
    assert_eq!(
        posts(&s.target.state),
        0,
        "the cross-site post decided nothing"
    );

    // The real form works (same session, its own token).
    let r = http
        .post(&approve)
        .header("cookie", &session)
        .form(&[
            ("fingerprint", fingerprint.as_str()),
            ("csrf", csrf.as_str()),
        ])
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    assert_eq!(status, 303, "{}", r.text().await.unwrap());
    let state = s.target.state.clone();
    crate::harness::eventually("the approved call is sent", || posts(&state) == 1).await;

    // Headers: a CSP without unsafe-inline, no framing, no caching, the server time.
    let r = http
        .get(format!("{base}/ui/approvals"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert!(r.headers()["server-timing"]
        .to_str()
        .unwrap()
        .starts_with("app;dur="));
    browser.close().await;
}

/// A page on another loopback port with a form that posts the approval (no CSRF token).
async fn cross_site_page(approve: &str, fingerprint: &str) -> String {
    let html = format!(
        "<!doctype html><form method=post action='{approve}'><input type=hidden name=fingerprint value='{fingerprint}'><button id=go type=submit>win a prize</button></form>"
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { axum::response::Html(html) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

fn short_sessions(target: &str) -> String {
    format!(
        "{}\n[console]\nsession_ttl = \"2s\"\n",
        super::console_config(target)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_decides_nothing_and_an_actor_cannot_log_in() {
    let s = setup_with("ui-expired", short_sessions).await;
    let base = base(&s.served);
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let call = mcp.call("pay_invoice", pay("late-co", 5), json!({})).await;
    let id = execution_id(&call);
    let browser = Browser::start().await;
    let c = &browser.client;

    // An agent's token is not an operator's.
    c.goto(&format!("{base}/ui/login")).await.unwrap();
    c.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(BILLING_TOKEN)
        .await
        .unwrap();
    click(c, "section.login button[type=submit]").await;
    let note = wait_for(c, "the refusal", "p.notice", |t| !t.is_empty()).await;
    assert!(note.contains("agent's (actor's) token"), "{note}");

    log_in(c, &base, ALICE_TOKEN).await;
    c.goto(&format!("{base}/ui/approvals/{id}")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    click(c, "#decide form.approve button").await;
    let note = wait_for(c, "the log-in page", "p.notice", |t| !t.is_empty()).await;
    assert!(note.contains("NOT applied"), "{note}");
    assert!(c
        .current_url()
        .await
        .unwrap()
        .path()
        .starts_with("/ui/login"));
    assert_eq!(posts(&s.target.state), 0);
    let again = mcp.call("pay_invoice", pay("late-co", 5), json!({})).await;
    assert_eq!(execution(&again)["state"], "awaiting_approval", "{again}");

    // Logged in again, the same page decides.
    c.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(ALICE_TOKEN)
        .await
        .unwrap();
    click(c, "section.login button[type=submit]").await;
    // Back where the decision was attempted.
    wait_for(c, "back on the request", "h1", |t| {
        t.starts_with("Approval request")
    })
    .await;
    click(c, "#decide form.approve button").await;
    wait_for(c, "approved", "#decided .by", |t| t == "alice").await;
    let state = s.target.state.clone();
    crate::harness::eventually("the approved call is sent", || posts(&state) == 1).await;
    let _ = text(c, "h1").await;
    browser.close().await;
}

/// The Activity page's filters (a bad one is a 400 naming it) and paging, and the Audit page's
/// "verify now" (the store's chains VALID), through plain HTTP with a console session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_filters_and_audit_verification() {
    let s = setup("ui-activity").await;
    let base = base(&s.served);
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = mcp
            .call("create_invoice", pay(&format!("act-{i}"), 1 + i), json!({}))
            .await;
        ids.push(execution_id(&r));
    }
    let r = mcp.call("pay_invoice", pay("act-pay", 2), json!({})).await;
    let waiting = execution_id(&r);
    let (session, csrf) = session_of(&s.served, ALICE_TOKEN).await;
    let http = http_builder().build().unwrap();
    let get = |path: String| {
        let req = http
            .get(format!("{base}{path}"))
            .header("cookie", session.clone());
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, all) = get("/ui/activity".into()).await;
    assert_eq!(status, 200);
    assert!(
        ids.iter()
            .chain([&waiting])
            .all(|id| all.contains(id.as_str())),
        "{all}"
    );
    let (_, paid) = get("/ui/activity?tool=pay_invoice&state=awaiting_approval".into()).await;
    assert!(
        paid.contains(waiting.as_str()) && !paid.contains(ids[0].as_str()),
        "{paid}"
    );
    let (_, none) = get("/ui/activity?actor=nobody".into()).await;
    assert!(none.contains("No execution matches"), "{none}");
    // Newest first; a page that starts before the newest create_invoice leaves it out.
    let (_, older) = get(format!(
        "/ui/activity?tool=create_invoice&before={}",
        ids[2]
    ))
    .await;
    assert!(
        older.contains(ids[1].as_str()) && !older.contains(&format!("/ui/executions/{}", ids[2])),
        "{older}"
    );
    let (_, future) = get("/ui/activity?from=2999-01-01T00:00".into()).await;
    assert!(future.contains("No execution matches"), "{future}");
    for (bad, says) in [
        ("state=flying", "is not a state"),
        ("from=yesterday", "is not a time"),
        ("before=exe_x", "is not an execution id"),
    ] {
        let (status, page) = get(format!("/ui/activity?{bad}")).await;
        assert_eq!(status, 400, "{bad}");
        assert!(page.contains(says), "{bad}: {page}");
    }
    let (status, _) = get("/ui/executions/exe_00000000000000000000000000".into()).await;
    assert_eq!(status, 404);

    let (status, audit) = get("/ui/audit".into()).await;
    assert_eq!(status, 200);
    assert!(audit.contains("Verify now"), "{audit}");
    let r = http
        .post(format!("{base}/ui/audit/verify"))
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let report = r.text().await.unwrap();
    assert!(
        report.contains("<span class=\"ok\">VALID</span>"),
        "{report}"
    );
}

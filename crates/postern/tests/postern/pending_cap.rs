//! Issue 49, point 6: an agent filled the approval queue (3,000 pending in 5 s) and the lists
//! silently showed the newest 1,000. Now an actor has at most `max_pending_approvals_per_actor`
//! calls waiting; one more is recorded rejected with the reason, nothing sent, and the agent
//! told why. `/ops/approvals` pages and says how many more there are. Real `postern serve`,
//! real invoice API.

use serde_json::json;

use serde_json::Value;

use crate::console::{base, ops, pay, setup_with};
use crate::harness::{
    execution, execution_id, http_builder, posts, Mcp, Served, ALICE_TOKEN, BILLING_TOKEN,
};

/// A `GET` of the operator API, parsed.
async fn get(served: &Served, path: &str) -> (u16, Value) {
    let r = http_builder()
        .build()
        .unwrap()
        .get(format!("{}{path}", base(served)))
        .bearer_auth(ALICE_TOKEN)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

fn capped(target: &str) -> String {
    crate::console::console_config(target).replace(
        "[gateway]\n",
        "[gateway]\nmax_pending_approvals_per_actor = 3\n",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_at_its_pending_approval_cap_is_told_why_and_nothing_is_sent() {
    let s = setup_with("pending-cap", capped).await;
    let mcp = Mcp::connect(&s.served.url, BILLING_TOKEN).await;
    let mut waiting = Vec::new();
    for n in 0..3 {
        let r = mcp.call("pay_invoice", pay("cap-co", n), json!({})).await;
        assert_eq!(execution(&r)["state"], "awaiting_approval", "{r}");
        waiting.push(execution_id(&r));
    }
    // An identical retry of a waiting call is that call, not one more request.
    let again = mcp.call("pay_invoice", pay("cap-co", 0), json!({})).await;
    assert_eq!(execution_id(&again), waiting[0]);
    assert_eq!(execution(&again)["state"], "awaiting_approval");

    let over = mcp.call("pay_invoice", pay("cap-co", 3), json!({})).await;
    let ex = execution(&over);
    assert_eq!(ex["state"], "rejected", "{over}");
    let told = ex["next_step"].as_str().unwrap_or_default();
    assert!(
        told.contains("max_pending_approvals_per_actor = 3") && told.contains("nothing was sent"),
        "{over}"
    );
    assert_eq!(posts(&s.target.state), 0, "nothing is sent");

    // The operator's list pages, and says how many more there are.
    let (status, page) = get(&s.served, "/ops/approvals?limit=2").await;
    assert_eq!(status, 200, "{page}");
    let shown: Vec<&str> = page["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(shown, [waiting[2].as_str(), waiting[1].as_str()], "{page}");
    assert_eq!(page["more"], 1, "{page}");
    let next = format!(
        "/ops/approvals?limit=2&before={}",
        page["next_before"].as_str().unwrap()
    );
    let (_, rest) = get(&s.served, &next).await;
    assert_eq!(rest["approvals"][0]["execution_id"], waiting[0], "{rest}");
    assert_eq!(
        (
            rest["more"].clone(),
            rest["approvals"].as_array().unwrap().len()
        ),
        (json!(0), 1)
    );

    // Once an operator decides one of them, the refused call asks for its approval on its
    // identical retry (nothing was lost).
    let deny = format!("/ops/approvals/{}/deny", waiting[1]);
    assert_eq!(ops(&s.served, ALICE_TOKEN, &deny, json!({})).await.0, 200);
    let retried = mcp.call("pay_invoice", pay("cap-co", 3), json!({})).await;
    assert_eq!(
        execution(&retried)["state"],
        "awaiting_approval",
        "{retried}"
    );
    assert_ne!(execution_id(&retried), execution_id(&over));
}

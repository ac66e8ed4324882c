//! The target answers: verdicts, the idempotency key, credentials, headers and the body cap.

use postern_channels::http::{
    AnswerVerdict, Credential, HttpChannel, HttpOutcome, OutcomeRules, Secret,
};

use crate::support::{answered, dispatch, TestServer};

const EXE: &str = "exe_01jz8k3m4n5p6q7r8s9t0v1w2x";

#[tokio::test]
async fn created_is_applied_with_body_and_the_execution_id_as_idempotency_key() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let mut req = dispatch("POST", server.url("/status/201"));
    req.body = Some(br#"{"amount":42}"#.to_vec());
    req.idempotency = Some(("Idempotency-Key".to_string(), EXE.to_string()));

    let answer = answered(channel.dispatch(req).await);
    assert_eq!(answer.status, 201);
    assert_eq!(answer.verdict, AnswerVerdict::Applied);
    assert_eq!(answer.body, br#"{"status":201}"#);
    assert_eq!(answer.size, 14);
    assert!(!answer.truncated);
    assert_eq!(answer.body_error, None);
    assert_eq!(answer.header("content-type"), Some("application/json"));

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].headers["idempotency-key"], EXE);
    assert_eq!(seen[0].headers["content-type"], "application/json");
    assert_eq!(&seen[0].body[..], br#"{"amount":42}"#);
}

#[tokio::test]
async fn the_same_dispatch_twice_carries_the_same_key() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let mut req = dispatch("PUT", server.url("/things/1"));
    req.body = Some(b"{}".to_vec());
    req.idempotency = Some(("Idempotency-Key".to_string(), EXE.to_string()));

    answered(channel.dispatch(req.clone()).await);
    answered(channel.dispatch(req).await);
    let keys: Vec<_> = server
        .seen()
        .iter()
        .map(|s| s.headers["idempotency-key"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, [EXE, EXE]);
}

#[tokio::test]
async fn the_idempotency_header_name_is_the_configured_one_and_absent_without_a_key() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let mut req = dispatch("POST", server.url("/a"));
    req.idempotency = Some(("X-Request-Key".to_string(), EXE.to_string()));
    answered(channel.dispatch(req).await);
    answered(channel.dispatch(dispatch("GET", server.url("/b"))).await);

    let seen = server.seen();
    assert_eq!(seen[0].headers["x-request-key"], EXE);
    assert!(!seen[0].headers.contains_key("idempotency-key"));
    assert!(!seen[1].headers.contains_key("idempotency-key"));
    assert!(!seen[1].headers.contains_key("x-request-key"));
    assert!(
        !seen[1].headers.contains_key("content-type"),
        "no body, no type"
    );
}

#[tokio::test]
async fn credentials_arrive_as_configured() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let credentials = [
        Credential::Bearer(Secret::new("tok_123")),
        Credential::Basic {
            username: "user".to_string(),
            password: Secret::new("pass"),
        },
        Credential::Header {
            name: "X-Api-Key".to_string(),
            value: Secret::new("key_456"),
        },
    ];
    for credential in credentials {
        let mut req = dispatch("GET", server.url("/whoami"));
        req.credential = Some(credential);
        answered(channel.dispatch(req).await);
    }
    let seen = server.seen();
    assert_eq!(seen[0].headers["authorization"], "Bearer tok_123");
    // base64("user:pass")
    assert_eq!(seen[1].headers["authorization"], "Basic dXNlcjpwYXNz");
    assert_eq!(seen[2].headers["x-api-key"], "key_456");
    assert!(!seen[2].headers.contains_key("authorization"));
}

#[tokio::test]
async fn status_codes_map_to_verdicts_by_default() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let cases = [
        (200, AnswerVerdict::Applied),
        (204, AnswerVerdict::Applied),
        (422, AnswerVerdict::Rejected { retryable: false }),
        (404, AnswerVerdict::Rejected { retryable: false }),
        (429, AnswerVerdict::Rejected { retryable: true }),
        (408, AnswerVerdict::Unknown),
        (500, AnswerVerdict::Unknown),
        (503, AnswerVerdict::Unknown),
    ];
    for (status, verdict) in cases {
        let answer = answered(
            channel
                .dispatch(dispatch("POST", server.url(&format!("/status/{status}"))))
                .await,
        );
        assert_eq!(answer.status, status);
        assert_eq!(answer.verdict, verdict, "status {status}");
        if status == 429 {
            assert_eq!(answer.header("retry-after"), Some("7"));
        }
    }
}

#[tokio::test]
async fn overridden_status_codes_take_the_tool_s_verdict() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let mut req = dispatch("POST", server.url("/status/409"));
    req.outcome_rules = OutcomeRules::new()
        .with(409, AnswerVerdict::Applied)
        .with(500, AnswerVerdict::Rejected { retryable: true });
    let answer = answered(channel.dispatch(req.clone()).await);
    assert_eq!(answer.verdict, AnswerVerdict::Applied);
    req.url = server.url("/status/500");
    let answer = answered(channel.dispatch(req).await);
    assert_eq!(answer.verdict, AnswerVerdict::Rejected { retryable: true });
}

#[test]
fn the_default_rules_cover_every_class_of_status() {
    let rules = OutcomeRules::default();
    assert_eq!(rules.verdict(201), AnswerVerdict::Applied);
    assert_eq!(rules.verdict(299), AnswerVerdict::Applied);
    assert_eq!(rules.verdict(301), AnswerVerdict::Unknown);
    assert_eq!(
        rules.verdict(400),
        AnswerVerdict::Rejected { retryable: false }
    );
    assert_eq!(rules.verdict(408), AnswerVerdict::Unknown);
    assert_eq!(
        rules.verdict(429),
        AnswerVerdict::Rejected { retryable: true }
    );
    assert_eq!(
        rules.verdict(499),
        AnswerVerdict::Rejected { retryable: false }
    );
    assert_eq!(rules.verdict(500), AnswerVerdict::Unknown);
    assert_eq!(rules.verdict(599), AnswerVerdict::Unknown);
    assert_eq!(rules.verdict(600), AnswerVerdict::Unknown);
}

#[tokio::test]
async fn redirects_are_answers_and_are_not_followed() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let answer = answered(
        channel
            .dispatch(dispatch("POST", server.url("/redirect")))
            .await,
    );
    assert_eq!(answer.status, 303);
    assert_eq!(answer.verdict, AnswerVerdict::Unknown);
    assert_eq!(answer.header("location"), Some("/landed"));
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "the redirect was followed: {seen:?}");
}

#[tokio::test]
async fn only_headers_of_interest_are_kept() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let answer = answered(channel.dispatch(dispatch("GET", server.url("/x"))).await);
    let names: Vec<_> = answer.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["content-type"]);
}

#[tokio::test]
async fn a_body_over_the_cap_is_truncated_and_its_full_size_counted() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let mut req = dispatch("GET", server.url("/big/100000"));
    req.max_response_bytes = 1000;
    let answer = answered(channel.dispatch(req.clone()).await);
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, vec![b'x'; 1000]);
    assert_eq!(answer.size, 100_000);
    assert!(answer.truncated);
    assert_eq!(answer.body_error, None);

    req.url = server.url("/big/1000");
    let answer = answered(channel.dispatch(req).await);
    assert_eq!((answer.body.len(), answer.size), (1000, 1000));
    assert!(!answer.truncated, "exactly the cap is not truncated");
}

#[tokio::test]
async fn probe_sends_the_same_request() {
    let server = TestServer::start().await;
    let channel = HttpChannel::new();
    let url = server.url("/invoices?idempotency_key=exe_1");
    match channel.probe(dispatch("GET", url)).await {
        HttpOutcome::Answered(a) => assert_eq!(a.verdict, AnswerVerdict::Applied),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.seen()[0].uri, "/invoices?idempotency_key=exe_1");
}
